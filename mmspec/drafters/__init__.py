from mmspec.drafters.base import Drafter, NoDraft
from mmspec.drafters.draft_model import DraftModelDrafter
from mmspec.drafters.fill import FILLS, CopyFill, NGramFill, RandomFill, make_fill
from mmspec.drafters.jacobi import CoupledRedraw, GumbelRedraw, IndependentRedraw, JacobiDrafter
from mmspec.drafters.lookup import LookupDrafter
from mmspec.steps import Draft

__all__ = ["Draft", "Drafter", "NoDraft", "DraftModelDrafter", "FILLS", "CopyFill", "NGramFill", "RandomFill",
           "make_fill", "CoupledRedraw", "GumbelRedraw", "IndependentRedraw", "JacobiDrafter", "LookupDrafter"]

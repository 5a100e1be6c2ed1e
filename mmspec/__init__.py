"""mmspec: lossless speculative decoding for autoregressive image, video and text token models."""
from mmspec.adapters.reference import ReferenceTarget
from mmspec.api import Generation, generate
from mmspec.layouts import Grid2D, Grid3D, Sequence1D
from mmspec.methods import METHODS, Method, resolve_method
from mmspec.reference.gpt import GPT, GPTConfig
from mmspec.sampling import Sampling
from mmspec.stats import Stats

__all__ = ["generate", "Generation", "Sampling", "Stats", "Sequence1D", "Grid2D", "Grid3D", "METHODS", "Method",
           "resolve_method", "GPT", "GPTConfig", "ReferenceTarget"]
__version__ = "0.1.0"

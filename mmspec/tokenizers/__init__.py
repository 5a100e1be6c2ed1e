"""Image tokenizers: token grids <-> pixels."""
from mmspec.tokenizers.vq import VQTokenizer

__all__ = ["VQTokenizer"]

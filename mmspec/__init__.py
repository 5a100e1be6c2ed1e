"""mmspec: lossless speculative decoding for autoregressive image, video and text token models."""
from importlib import import_module

from mmspec.adapters.reference import ReferenceTarget
from mmspec.api import Generation, generate
from mmspec.layouts import Grid2D, Grid3D, Sequence1D
from mmspec.methods import METHODS, Method, resolve_method
from mmspec.reference.gpt import GPT, GPTConfig
from mmspec.sampling import Sampling
from mmspec.stats import Stats

# heavier pieces (transformers / diffusers models) load on first use
_LAZY = {
    "HFCausalLM": "mmspec.adapters.text", "generate_text": "mmspec.pipelines.text",
    "JanusImage": "mmspec.adapters.janus", "Emu3Image": "mmspec.adapters.emu3", "CosmosTarget": "mmspec.adapters.cosmos",
    "ImagePipeline": "mmspec.pipelines", "VideoPipeline": "mmspec.pipelines", "TextPipeline": "mmspec.pipelines",
}

__all__ = ["generate", "Generation", "Sampling", "Stats", "Sequence1D", "Grid2D", "Grid3D", "METHODS", "Method",
           "resolve_method", "GPT", "GPTConfig", "ReferenceTarget", *_LAZY]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mmspec' has no attribute {name!r}")

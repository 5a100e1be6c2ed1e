"""mmspec: lossless speculative decoding for autoregressive image, video and text token models."""
from importlib import import_module

# every name loads on first use: `import mmspec` (and the `mmspec` command's start, mmspec.__main__) loads no torch
_LAZY = {
    "generate": "mmspec.api", "Generation": "mmspec.request", "Engine": "mmspec.engine", "Engines": "mmspec.engine", "Sampling": "mmspec.sampling", "Stats": "mmspec.stats",
    "Sequence1D": "mmspec.layouts", "Grid2D": "mmspec.layouts", "Grid3D": "mmspec.layouts",
    "METHODS": "mmspec.methods", "Method": "mmspec.methods", "resolve_method": "mmspec.methods",
    "GPT": "mmspec.reference.gpt", "GPTConfig": "mmspec.reference.gpt", "ReferenceTarget": "mmspec.adapters.reference",
    "HFCausalLM": "mmspec.adapters.text", "generate_text": "mmspec.pipelines.text",
    "JanusImage": "mmspec.adapters.janus", "Emu3Image": "mmspec.adapters.emu3", "CosmosTarget": "mmspec.adapters.cosmos",
    "ImagePipeline": "mmspec.pipelines", "VideoPipeline": "mmspec.pipelines", "TextPipeline": "mmspec.pipelines",
}

__all__ = list(_LAZY)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    try:  # a submodule not imported yet (`import mmspec; mmspec.layouts`), as an eager package had them
        return import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
    raise AttributeError(f"module 'mmspec' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])

from pathlib import Path

from mmspec.pipelines.base import models_dir
from mmspec.pipelines.grid import ImageOutput, ImagePipeline, VideoOutput, VideoPipeline
from mmspec.pipelines.text import TextOutput, TextPipeline

__all__ = ["ImagePipeline", "ImageOutput", "VideoPipeline", "VideoOutput", "TextPipeline", "TextOutput",
           "PIPELINES", "load_pipeline", "model_folder"]

PIPELINES = {"image": ImagePipeline, "video": VideoPipeline, "text": TextPipeline}


def model_folder(kind: str, model=None) -> Path:
    """The model folder a kind runs: the one named, else the bundled one (not checked: loading it says what is
    missing)."""
    return Path(model) if model is not None else models_dir() / PIPELINES[kind].default_model


def load_pipeline(kind: str, model=None, draft=None, device="cpu", window_cache=None, compile=False,
                  allow_torchscript=False):
    """The pipeline of a kind (image, video, text) on a model folder (None: the bundled one); text also takes a
    draft model folder. window_cache: where auto windows' measurements are kept across processes (None: the
    user's default, $MMSPEC_WINDOW_CACHE; 'off': nowhere, so each process measures what a first call gets;
    see mmspec.window.WindowCache). allow_torchscript: video, a Cosmos folder's TorchScript tokenizer."""
    if kind == "text":
        return TextPipeline.from_pretrained(model, draft=draft, device=device, window_cache=window_cache,
                                            compile=compile)
    if kind == "video":
        return VideoPipeline.from_pretrained(model, device=device, window_cache=window_cache, compile=compile,
                                             allow_torchscript=allow_torchscript)
    return PIPELINES[kind].from_pretrained(model, device=device, window_cache=window_cache, compile=compile)

from pathlib import Path

from mmspec.families import load
from mmspec.pipelines.base import models_dir
from mmspec.pipelines.grid import ImagePipeline, VideoPipeline
from mmspec.pipelines.outputs import ImageOutput, VideoOutput
from mmspec.pipelines.text import TextOutput, TextPipeline
from mmspec.threads import scoped

__all__ = ["ImagePipeline", "ImageOutput", "VideoPipeline", "VideoOutput", "TextPipeline", "TextOutput",
           "PIPELINES", "load_pipeline", "model_folder"]

PIPELINES = {"image": ImagePipeline, "video": VideoPipeline, "text": TextPipeline}  # each kind's door


def model_folder(kind: str, model=None) -> Path:
    """The model folder a kind runs: the one named, else the bundled one (not checked: loading it says what is
    missing)."""
    return Path(model) if model is not None else models_dir() / PIPELINES[kind].default_model


@scoped("device")
def load_pipeline(kind: str, model=None, draft=None, device="cpu", window_cache=None, compile=False,
                  allow_torchscript=False, door: str = "pipeline", img_size: "int | None" = None):
    """The pipeline of a kind (image, video, text) on a model folder of any family (None: the bundled one), through
    `door` (mmspec.families.DOORS: what a refusal names); text also takes a draft model folder. window_cache: where
    auto windows' measurements are kept across processes (None: the user's default, $MMSPEC_WINDOW_CACHE; 'off':
    nowhere, so each process measures what a first call gets; see mmspec.window.WindowCache). allow_torchscript:
    video, a Cosmos folder's TorchScript tokenizer. img_size: image, a Janus folder's image side in pixels
    (deepseek's)."""
    return load(model, kind, door, device=device, window_cache=window_cache, compile=compile, draft=draft,
                allow_torchscript=allow_torchscript, img_size=img_size)

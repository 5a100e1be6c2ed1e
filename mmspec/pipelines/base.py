"""What every pipeline shares: where the bundled models are, progress bars, output stats."""
from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path

import torch

from mmspec.window import AutoWindow, WindowMemory

def models_dir() -> Path:
    """Where the bundled models are: $MMSPEC_MODELS, else the models/ folder of the source checkout."""
    return Path(os.environ.get("MMSPEC_MODELS") or Path(__file__).resolve().parents[2] / "models")


def model_path(path: "str | Path | None", default: str) -> Path:
    """A model folder: the given path, or the bundled model `default` in the repository's models/."""
    path = Path(path) if path is not None else models_dir() / default
    if not path.is_dir():
        hint = ""
        if path.parent == models_dir():
            hint = (" (the bundled models ship in the models/ folder of the mmspec repository, not in the wheel: "
                    "install from a clone with `pip install -e .`, or set MMSPEC_MODELS=/path/to/mmspec/models, "
                    "or pass a model folder)")
        raise FileNotFoundError(f"no model folder at {path}{hint}")
    return path


@contextmanager
def progress(total: int, desc: str, enabled: bool):
    """A tqdm bar over committed tokens; yields the on_commit hook for mmspec.generate."""
    if not enabled:
        yield None
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, desc=desc, unit="tok", leave=False) as bar:
        yield lambda state, k: bar.update(int(k.sum()))


# What a pipeline call does unless told otherwise: the tokens of plain AR with the same seed (`exact`),
# with the window picked at every step from measured costs and acceptance, 1 (plain AR) included.
DEFAULT_METHOD = "exact"
DEFAULT_WINDOW = "auto"


def resolve_window(window, widest: int, memories: "WindowMemories | None" = None, method=None) -> "int | AutoWindow":
    """None or "auto" -> an AutoWindow of up to `widest` positions (the pipeline's default_window) that starts
    from what earlier calls with the same method learned (`memories`: the pipeline's, by method name); an int
    as is."""
    if window is None or window == "auto":
        memory = memories[method] if memories is not None and isinstance(method, str) else None
        return AutoWindow(max_window=widest, memory=memory)
    return window


def remember(window) -> None:
    """After a call: write what an auto window learned to its memory's file, if it has one."""
    if isinstance(window, AutoWindow) and window.memory is not None:
        window.memory.save()


class WindowMemories(dict):
    """method -> WindowMemory: what window="auto" learned across a pipeline's calls. With a folder (pipelines
    made by from_pretrained get `window_folder(model)`), each method's memory is kept in a file there, per
    device and CPU thread count (both change every timing), so a new process starts from it. `prior`: the model's
    acceptance prior by method (mmspec.window.load_prior), so that a first call need not explore."""

    def __init__(self, folder: "Path | None" = None, device="cpu", prior: "dict | None" = None):
        super().__init__()
        self.folder, self.device, self.prior = folder, str(device).replace(":", ""), prior or {}

    def __missing__(self, method: str) -> WindowMemory:
        name = f"{method}-{self.device}-{torch.get_num_threads()}threads.json"
        path = None if self.folder is None else self.folder / name
        memory = self[method] = WindowMemory(path, self.prior.get(method))
        return memory


def window_folder(model: Path) -> "Path | None":
    """Where auto windows' measurements for a model folder are kept: $MMSPEC_WINDOW_CACHE (or ~/.cache/mmspec/
    windows), in a folder named after the model and a hash of its path and weights files; None when
    MMSPEC_WINDOW_CACHE=off."""
    root = os.environ.get("MMSPEC_WINDOW_CACHE")
    if root == "off":
        return None
    if not root:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mmspec" / "windows"
    model = model.resolve()
    key = [str(model)] + [f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in sorted(model.iterdir())
                          if f.suffix in (".safetensors", ".json") and f.is_file()]
    return Path(root) / f"{model.name}-{hashlib.sha1(chr(0).join(key).encode()).hexdigest()[:10]}"


def chain(*hooks):
    """One on_commit hook that calls each given hook in turn; None when none is given."""
    hooks = [h for h in hooks if h is not None]
    if not hooks:
        return None

    def hook(state, k):
        for h in hooks:
            h(state, k)
    return hook


def stats_dict(stats, seconds: float | None = None) -> dict:
    out = stats.summary()
    out["nfe_per_row"] = round(stats.nfe.float().mean().item(), 2)
    if seconds is not None:
        out["seconds"] = round(seconds, 3)
    return out


def as_list(prompt) -> list:
    return [prompt] if isinstance(prompt, (str, torch.Tensor)) else list(prompt)

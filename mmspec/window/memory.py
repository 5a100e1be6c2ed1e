"""What auto windows keep: a model's acceptance prior (its window-prior.json), and the measurements of earlier
generations, in memory and on disk (one file per model, method, device and CPU thread count)."""
from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from mmspec.state import DecodeState

PRIOR_FILE = "window-prior.json"


Prior = dict[int, dict[int, "float | list[float]"]]  # batch size -> window -> tokens per step (overall or by band)


def load_prior(folder: "str | Path", greedy: bool = False) -> dict[str, Prior]:
    """A model folder's acceptance prior (its `window-prior.json`, written by models/recipes/window_prior.py):
    method -> batch size -> window -> tokens per step by which the batch's rearmost row moved, under the model's
    default sampling (`greedy`: at temperature 0, for the methods the file measured so; {} for the others), by band
    of the output where the file has them (steps by where they start: the top rows of an image are harder than the
    rest), else overall. {} when the folder has none."""
    path = Path(folder) / PRIOR_FILE
    if not path.is_file():
        return {}
    saved = json.loads(path.read_text())
    first = "greedy_" if greedy else ""
    saved = {**saved.get(f"{first}tokens_per_step", {}), **saved.get(f"{first}tokens_per_step_by_band", {})}
    return {method: {int(rows): {int(L): _floats(t) for L, t in by_window.items()} for rows, by_window in by_rows.items()}
            for method, by_rows in saved.items()}


def prior_at(prior: Prior, rows: int, windows: list[int]) -> dict[int, tuple[float, ...]]:
    """A method's prior (batch size -> window -> tokens per step, overall or by band) at a batch of `rows` for each
    window, by band (one band where the prior is overall): from the prior's batch size nearest in ratio,
    interpolated linearly in log L between its windows, held beyond them."""
    near = prior[min(prior, key=lambda R: (abs(math.log(R / rows)), R))]
    known = sorted(near)
    bands = np.array([np.atleast_1d(near[W]) for W in known], dtype=float)  # [windows, bands]
    x = [math.log2(W) for W in known]
    return {L: tuple(float(np.interp(math.log2(L), x, band)) for band in bands.T) for L in windows}



class WindowMemory:
    """AutoWindow's measurements kept across generations: decayed tokens and the steps they were counted over, the
    seconds of the last timed steps, and the steps a losing window waits before its next recheck, per window, for
    each batch shape (rows, the rows of a group its tokens count by, CFG or not, greedy or not). One per pipeline
    and method, i.e. per model, device and method. Its `prior` (batch size -> window -> tokens per step, from
    `load_prior`; `greedy_prior` at temperature 0) is what is known of the method on the model before anything is
    measured.

    With a `path`, the measurements are read from that JSON file when the memory is made, and `save()` writes
    them back, so that the next process on the same machine (the next CLI call, a job's next run) starts from
    the best known window instead of exploring from plain AR. A file that cannot be read is set aside with a
    warning: it only holds timings, and measuring again gives them back.
    """

    # anchors: L -> [the L running when it was last timed, that L's cost then] (Estimate.per_step): an
    # L probed in the first rows of an output is judged against plain AR timed at its last rows otherwise
    fields = ("tokens", "counted", "prior_extra", "seconds", "anchors", "wait")
    # of the file's fields (1: decayed step seconds; 2: no prior_extra; 3: no greedy in a shape; 4: no anchors; 5: no
    # group in a shape): a pipeline names its files with it
    version = 6

    def __init__(self, path: "str | Path | None" = None, prior: "Prior | None" = None,
                 greedy_prior: "Prior | None" = None):
        self.path = Path(path) if path is not None else None
        self.prior, self.greedy_prior = prior or {}, greedy_prior or {}
        self.shapes: dict[tuple, tuple[dict, ...]] = {}
        if self.path is not None and self.path.is_file():
            try:
                saved = json.loads(self.path.read_text())
                self.shapes = {(int(rows), int(group), bool(cfg), bool(greedy)): tuple(
                    {int(L): _floats(v) for L, v in shape[f].items()} for f in self.fields)
                    for rows, group, cfg, greedy, shape in saved["shapes"]}
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                warnings.warn(f"ignoring the window measurements in {self.path} ({err!r}); measuring afresh")
                self.shapes = {}

    def measurements(self, state: "DecodeState", rows: int, group: int, windows: list[int],
                     recheck: int) -> tuple[dict, ...]:
        """(tokens, counted, prior_extra, seconds, anchors, wait) by window for the batch shape of `rows` rows in
        groups of `group` (mmspec.window.batch_progress) and the state's sampling: shared dicts the policy updates
        (AutoWindow's); an L without an anchor has none."""
        shape = self.shapes.setdefault(self._shape(state, rows, group), tuple({} for _ in self.fields))
        for values, empty in zip(shape, (0.0, 0.0, 0.0, list, None, recheck)):
            for L in windows if empty is not None else ():
                values.setdefault(L, empty() if callable(empty) else empty)
        return shape

    def prior_for(self, state: "DecodeState") -> Prior:
        """The prior for the state's sampling: the greedy one at temperature 0 where there is one (greedy text copies
        and drafts far better than sampled text)."""
        return self.greedy_prior if state.sampling.temperature == 0 and self.greedy_prior else self.prior

    @staticmethod
    def _shape(state: "DecodeState", rows: int, group: int) -> tuple[int, int, bool, bool]:
        """Rows, a group's rows, CFG, greedy: what changes a step's cost or its tokens."""
        return rows, group, bool(state.sampling.cfg), state.sampling.temperature == 0

    def save(self) -> None:
        """Write the measurements to `path` (atomically: a concurrent reader sees the old file or the new one)."""
        if self.path is None or not self.shapes:  # nothing measured (e.g. a method with a fixed window)
            return
        # (a copy of the items first: an engine's thread may be adding a shape)
        shapes = [[*shape, dict(zip(self.fields, values))] for shape, values in list(self.shapes.items())]
        # (one scratch file per process and thread: calls made at once save at once)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"shapes": shapes}))
            os.replace(tmp, self.path)
        except OSError as err:  # a read-only home must not fail a generation that is done
            warnings.warn(f"could not keep the window measurements in {self.path} ({err}); set MMSPEC_WINDOW_CACHE "
                          "to a writable folder, or to off")


def _floats(value) -> "float | list[float]":
    return [float(v) for v in value] if isinstance(value, list) else float(value)


class WindowMemories(dict):
    """method -> WindowMemory: what window="auto" learned across a pipeline's calls. With a folder, each method's
    memory is kept in a file there, per device and CPU thread count (both change every timing), so a new process
    starts from it. `prior`: the model's acceptance prior by method (load_prior), so that a first
    call need not explore; `greedy_prior` at temperature 0."""

    def __init__(self, folder: "Path | None" = None, device="cpu", prior: "dict | None" = None,
                 greedy_prior: "dict | None" = None):
        super().__init__()
        self.folder, self.device = folder, str(device).replace(":", "")
        self.prior, self.greedy_prior = prior or {}, greedy_prior or {}

    def __missing__(self, method: str) -> WindowMemory:
        name = f"{method}-{self.device}-{torch.get_num_threads()}threads-v{WindowMemory.version}.json"
        path = None if self.folder is None else self.folder / name
        memory = self[method] = WindowMemory(path, self.prior.get(method), self.greedy_prior.get(method))
        return memory


class WindowCache:
    """Where pipelines keep what auto windows measured, across processes: a root folder with one folder per model
    (its name and a hash of its path and weights files), or nowhere (root None: each process measures afresh)."""

    def __init__(self, root: "str | Path | None"):
        self.root = None if root is None else Path(root)

    @classmethod
    def coerce(cls, cache: "WindowCache | str | Path | None") -> "WindowCache":
        """None: the user's default, $MMSPEC_WINDOW_CACHE (else ~/.cache/mmspec/windows); 'off': nowhere; a folder;
        a WindowCache as it is."""
        if isinstance(cache, WindowCache):
            return cache
        if cache is None:
            cache = os.environ.get("MMSPEC_WINDOW_CACHE") or (
                Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mmspec" / "windows")
        return cls(None if cache == "off" else cache)

    def folder(self, model: Path) -> "Path | None":
        if self.root is None:
            return None
        model = model.resolve()
        key = [str(model)] + [f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in sorted(model.iterdir())
                              if f.suffix in (".safetensors", ".json") and f.is_file()]
        return self.root / f"{model.name}-{hashlib.sha1(chr(0).join(key).encode()).hexdigest()[:10]}"

    def memories(self, model: Path, device) -> WindowMemories:
        """A pipeline's memories for a model folder, starting from the acceptance prior it ships (if any)."""
        return WindowMemories(self.folder(model), device, load_prior(model), load_prior(model, greedy=True))

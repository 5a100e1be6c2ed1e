"""What renders a batch, wherever it runs (this process or a Ray actor): pipeline call -> file bytes.

Rows of one engine call share their settings and input files and differ in prompt and seed; a row's output
does not depend on its batch mates, so a failed batch is retried row by row to find the rows at fault, and
the others come out with the same bytes as in the batch.
"""
from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from mmspec.render.inputs import load_inputs
from mmspec.render.job import Output

SAVE_OPTIONS = {"video": {"formats": ("gif",)}}  # GIF is byte-deterministic; MP4 encoders are not promised to be


@dataclass
class Result:
    data: bytes | None = None  # the file's bytes, or None when the row failed
    error: str | None = None
    nfe: int = 0  # target forwards of the row
    tokens: int = 0  # tokens the row committed
    seconds: float = 0.0  # the row's share of its batch's wall-clock


def render_batch(pipe, kind: str, batch: list[Output]) -> list[Result]:
    try:
        return _render(pipe, kind, batch)
    except Exception as err:  # noqa: BLE001 - any failure of a row is recorded, the job goes on
        if len(batch) == 1:
            return [Result(error=f"{type(err).__name__}: {err}")]
        return [result for output in batch for result in render_batch(pipe, kind, [output])]


def check_batches(pipe, batches: list[list[Output]]) -> None:
    """Refuses in one line (mmspec.memory.DoesNotFit), before any work, batches whose rows do not fit in memory at a
    time: each settings group's first (its largest), estimated for the longest prompt of the group."""
    groups: dict[str, list[list[Output]]] = {}
    for batch in batches:
        groups.setdefault(batch[0].group, []).append(batch)
    for group in groups.values():
        prompts = [o.prompt for batch in group for o in batch]
        pipe.check_rows(prompts, max(map(len, group)), **_call(pipe, group[0]))


def _render(pipe, kind: str, batch: list[Output]) -> list[Result]:
    t0 = time.perf_counter()
    out = pipe([o.prompt for o in batch], num_outputs=1, seed=[o.seed for o in batch], **_call(pipe, batch))
    files = _encode(out, kind)
    share = (time.perf_counter() - t0) / len(batch)
    return [Result(data, nfe=int(out.stats.nfe[i]), tokens=int(out.stats.committed[i]), seconds=share)
            for i, data in enumerate(files)]


def _call(pipe, batch: list[Output]) -> dict:
    """The pipeline call's options for a batch: its settings (the pipeline merges their sampling over the model's)
    and input files."""
    return {**batch[0].settings, **load_inputs(batch[0].inputs)}


def _encode(out, kind: str) -> list[bytes]:
    """The bytes `mmspec generate` would write for each row: the output's own save(), into a scratch folder."""
    with tempfile.TemporaryDirectory(prefix="mmspec-render-") as scratch:
        return [Path(p).read_bytes() for p in out.save(scratch, **SAVE_OPTIONS.get(kind, {}))]


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"

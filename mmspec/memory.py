"""How much memory a generation needs, estimated before any of its work, and how many rows fit at a time.

A row of a generation holds, for its whole run: the KV cache of every layer (twice with CFG, whose null condition is a
second row), and for as long as rows are leaving the batch a second copy of it (ActiveRows keeps the rows left by
copying their cache). Every step adds the logits of the window ([L, V] per cache row) and the work on them: p, q,
noise, drafts and the verification's masks, a few [L, V] tensors more, and the forward's activations. The estimate
counts all of it per row, from the target's `Shape` (its decoder's sizes and the condition's length), plus what a
generation holds whatever its rows (the noise memo).
`mmspec.generate` runs the rows that fit in the memory free now at a time, and refuses in one line when it is asked
for more rows at a time than fit, or when one row does not fit.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from mmspec.cache import session_slots
from mmspec.layouts import Layout
from mmspec.rng import MEMO_BYTES

STEP_COPIES = 12  # [L, V] fp32 tensors a step holds per row besides the logits (p, log p, q, noise, masks, drafts)
ACTIVATIONS = 16  # [L, dim] tensors a forward holds per cache row (hidden, q, k, v, the feed-forward's 3 x 8/3 dim)
SHARE = 0.5  # of the memory free now, what one generation may take: the machine runs other work too


@dataclass(frozen=True)
class Shape:
    """What the estimate reads of a target's decoder for a condition."""
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    dim: int  # the hidden size
    vocab: int  # logits per position
    prefix: int  # cache slots before the layout: the condition's (a class, a caption, the longest prompt)
    element: int  # bytes of a KV cache element (the embeddings' dtype)


@runtime_checkable
class Sized(Protocol):
    """A target whose memory is estimated: its decoder's `Shape` for a condition and layout (as `session` takes
    them)."""

    def memory_shape(self, condition: Any, layout: Layout) -> Shape:
        ...


def kv_bytes(shape: Shape, layout: Layout, cfg: bool, window: int) -> int:
    """Bytes of one row's KV cache as its session allocates it (CFG's null row included)."""
    slots = session_slots(shape.prefix + layout.length + window)
    return (2 if cfg else 1) * shape.layers * 2 * shape.kv_heads * slots * shape.head_dim * shape.element


def row_bytes(target, condition: Any, layout: Layout, cfg: bool, window: int) -> "int | None":
    """Bytes one row of a generation needs at most, for targets that give their `Shape` (Sized); None for others
    (not estimated: they run as asked)."""
    if not isinstance(target, Sized):
        return None
    shape = target.memory_shape(condition, layout)
    rows = 2 if cfg else 1
    slots = session_slots(shape.prefix + layout.length + window)
    step = (rows + STEP_COPIES) * window * shape.vocab * 4
    forward = rows * window * (ACTIVATIONS * shape.dim + shape.heads * slots) * 4
    tokens = (layout.length + window) * 8 * 6  # seq, forced, commit steps...
    return 2 * kv_bytes(shape, layout, cfg, window) + step + forward + tokens


def fixed_bytes() -> int:
    """What a generation holds whatever its rows: the noise memo (mmspec.rng)."""
    return MEMO_BYTES


def free_bytes(device) -> int:
    """Memory free now on `device`: an accelerator's free memory, else the machine's available memory (MemAvailable),
    or the room left under this process's cgroup limit where that is smaller."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    free = _meminfo("MemAvailable")
    limit = _read_int("/sys/fs/cgroup/memory.max")
    if limit is not None:
        free = min(free, limit - (_read_int("/sys/fs/cgroup/memory.current") or 0))
    return free


def rows_that_fit(per_row: int, budget: int) -> int:
    return max(0, (budget - fixed_bytes()) // per_row)


class DoesNotFit(ValueError):
    """Rows asked for at a time that do not fit in memory (or not even one row): the message says what fits."""


def rows_at_once(per_row: "int | None", rows: int, device, batch_size: "int | None" = None) -> int:
    """Rows to run at a time for a request of `rows`: `batch_size` when given and it fits, else as many as fit in
    SHARE of the memory free now; DoesNotFit (what was asked, what fits, the batch option) when `batch_size` rows do
    not fit, or not even one row does."""
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    asked = min(rows, batch_size or rows)
    if per_row is None:
        return asked
    budget = int(SHARE * free_bytes(device))
    fit = rows_that_fit(per_row, budget)
    if fit < 1 or (batch_size is not None and asked > fit):
        asking = f"{asked} rows at a time need" if asked > 1 else "1 row at a time needs"
        raise DoesNotFit(f"{asking} about {gib(fixed_bytes() + asked * per_row)} (KV cache, logits and drafts, CFG's "
                         f"copies included) and {gib(budget)} is free for them, which holds "
                         + (f"{fit} row{'s' * (fit > 1)}: pass batch_size={fit} (CLI: --batch-size {fit})" if fit else
                            "not even one row: free memory, or use a smaller window"))
    return min(asked, fit)


def gib(n: int) -> str:
    return f"{n / 2 ** 30:.2f} GiB"


def _meminfo(key: str) -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _read_int(path: str) -> "int | None":
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None

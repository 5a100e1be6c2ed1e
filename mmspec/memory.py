"""How much memory a generation needs, estimated before any of its work, and how many rows fit at a time.

A row of a generation holds, for its whole run: the KV cache of every layer (twice with CFG, whose null condition is a
second row), and for as long as rows are leaving the batch a second copy of it (ActiveRows keeps the rows left by
copying their cache). Every step adds the logits of the window ([L, V] per cache row) and the work on them: p, q,
noise, drafts and the verification's masks, a few [L, V] tensors more, and the forward's activations. The estimate
counts all of it per row, from the target's config, plus what a generation holds whatever its rows (the noise memo).
`mmspec.generate` runs the rows that fit in the memory free now at a time, and refuses in one line when it is asked
for more rows at a time than fit, or when one row does not fit.
"""
from __future__ import annotations

import os

import torch

from mmspec.cache import session_slots
from mmspec.layouts import Layout
from mmspec.rng import MEMO_BYTES

STEP_COPIES = 12  # [L, V] fp32 tensors a step holds per row besides the logits (p, log p, q, noise, masks, drafts)
ACTIVATIONS = 16  # [L, dim] tensors a forward holds per cache row (hidden, q, k, v, the feed-forward's 3 x 8/3 dim)
SHARE = 0.5  # of the memory free now, what one generation may take: the machine runs other work too


def row_bytes(target, layout: Layout, cfg: bool, window: int) -> "int | None":
    """Bytes one row of a generation needs at most, for targets whose model has a reference GPT config (the bundled
    image and video models, LlamaGen); None for others (not estimated: they run as asked)."""
    config = getattr(getattr(target, "model", None), "config", None)
    if config is None or not hasattr(config, "n_layer"):
        return None
    weight = next(target.model.parameters())
    element = weight.element_size()
    rows = 2 if cfg else 1
    heads, kv_heads = config.n_head, config.n_kv_head or config.n_head
    slots = session_slots(config.prefix_len + layout.length + window)
    kv = rows * config.n_layer * 2 * kv_heads * slots * (config.dim // heads) * element
    step = (rows + STEP_COPIES) * window * config.vocab_size * 4
    forward = rows * window * (ACTIVATIONS * config.dim + heads * slots) * 4
    tokens = (layout.length + window) * 8 * 6  # seq, forced, commit steps...
    return 2 * kv + step + forward + tokens


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


def plan(per_row: "int | None", rows: int, device, batch_size: "int | None" = None) -> int:
    """Rows to run at a time for a request of `rows`: `batch_size` when given and it fits, else as many as fit in
    SHARE of the memory free now; ValueError (what was asked, what fits, the batch option) when `batch_size` rows do
    not fit, or not even one row does."""
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    asked = min(rows, batch_size or rows)
    if per_row is None:
        return asked
    budget = int(SHARE * free_bytes(device))
    fit = rows_that_fit(per_row, budget)
    if fit < 1 or (batch_size is not None and asked > fit):
        raise ValueError(f"{asked} rows at a time need about {gib(fixed_bytes() + asked * per_row)} (KV cache, logits "
                         f"and drafts, CFG's copies included) and {gib(budget)} is free for them, which holds "
                         + (f"{fit} rows: pass batch_size={fit} (CLI: --batch-size {fit})" if fit else
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

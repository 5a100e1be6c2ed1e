"""A request's rows: how many its condition holds, each row's condition, given tokens, forced tokens and seed.

Rows are condition-major: row i is sample i % num_samples of condition i // num_samples. mmspec.generate and
mmspec.engine read a request through these, so that a row is the same in any batch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from mmspec.arguments import seed_list
from mmspec.layouts import FREE, Layout
from mmspec.rng import MAX_SEED
from mmspec.stats import Stats


@dataclass
class Generation:
    tokens: torch.Tensor  # [B, N] generated tokens, -1 after a row stopped early
    lengths: torch.Tensor  # [B] tokens generated per row
    stats: Stats


def count(condition) -> "int | None":
    """How many conditions: class ids [C], prompt ids [C, P], a list of prompts (strings or id lists), features
    [C, T, D] (a caption's, a text encoder's) alone or with their mask [C, T], a dict of such parts (Emu3's prompts
    and negative prompts) where a part of one is shared by all, or none (None: one, a target's unconditioned rows);
    None for other forms (run as they are)."""
    if condition is None:
        return 1
    if isinstance(condition, dict) and condition:
        counts = {count(part) for part in condition.values()}
        return max(counts) if None not in counts and len(counts - {1}) <= 1 else None
    if isinstance(condition, tuple) and len(condition) == 2 and torch.is_tensor(condition[0]):
        condition = condition[0]  # (features, mask)
    if torch.is_tensor(condition) and condition.dim() in ((3,) if condition.is_floating_point() else (1, 2)):
        return condition.shape[0]
    if isinstance(condition, list) and all(isinstance(c, (str, list)) for c in condition):
        return len(condition)
    return None


def take(condition, index: torch.Tensor):
    """The conditions at `index` [b], as `count` reads them."""
    if condition is None:
        return None
    if isinstance(condition, tuple):
        return tuple(None if c is None else take(c, index) for c in condition)
    if isinstance(condition, dict):  # (a part of one condition is every condition's: its row 0 for each)
        return {name: take(part, index if count(part) > 1 else torch.zeros_like(index))
                for name, part in condition.items()}
    return condition[index.to(condition.device)] if torch.is_tensor(condition) else [condition[i] for i in index]


def given_rows(given: "torch.Tensor | None", rows: torch.Tensor, batch: int,
                num_samples: int) -> "torch.Tensor | None":
    """`given` [R, N] (per row, per condition or for all; checked by `forced_rows`) for the rows `rows` [b] of a request of
    `batch` rows -> [b, N] (or [1, N] for all)."""
    if given is None or given.shape[0] == 1:
        return given
    return given[rows] if given.shape[0] == batch else given[rows // num_samples]


def check_given(given, layout: Layout, vocab_size: int) -> torch.Tensor:
    given = torch.as_tensor(given)
    if given.dim() != 2 or given.shape[1] != layout.length or given.is_floating_point():
        raise ValueError(f"given must be token ids [rows, {layout.length}] (-1 where the model generates), "
                         f"got {tuple(given.shape)} {given.dtype}")
    if given.numel() and (given.min() < -1 or given.max() >= vocab_size):
        raise ValueError(f"given tokens must be in [0, {vocab_size}) or -1, got values in "
                         f"[{int(given.min())}, {int(given.max())}]")
    structural = layout.forced()
    clash = (given >= 0) & (structural >= 0) & (given != structural)
    if clash.any():
        i = int(clash.any(0).nonzero()[0])
        raise ValueError(f"given token at index {i} differs from the layout's structural token {int(structural[i])}")
    return given.long()


def forced(layout: Layout, given: "torch.Tensor | None") -> torch.Tensor:
    """[R, N] the token each row of `given` (one row without it) must have at each index: structural, then
    given, else FREE."""
    forced = layout.forced()[None]
    return forced if given is None else torch.where(given >= 0, given, forced)


def forced_rows(forced: torch.Tensor, batch: int, num_samples: int, window: int) -> torch.Tensor:
    """[R, N] -> [B, N + L]: per row of the batch, then FREE past the end (the last window's overhang)."""
    rows = forced.shape[0]
    if rows * num_samples == batch:
        forced = forced.repeat_interleave(num_samples, 0)
    elif rows == 1:
        forced = forced.expand(batch, -1)
    elif rows != batch:
        raise ValueError(f"given has {rows} rows; pass one per row ({batch}), per condition "
                         f"({batch // num_samples}) or one for all")
    return torch.cat([forced, torch.full((batch, window), FREE)], 1)


def row_seeds(seed: "int | Sequence[int]", batch: int, num_samples: int) -> list[int]:
    """The seed of each of `batch` rows, condition-major with `num_samples` rows a condition."""
    seeds = seed_list(seed)
    if seeds is None:
        seeds = [seed + i % num_samples for i in range(batch)]
    if len(seeds) != batch:
        raise ValueError(f"seed: got {len(seeds)} seeds for {batch} rows; pass one int or one seed per row")
    if min(seeds) < 0 or max(seeds) > MAX_SEED:  # (a larger seed would wrap onto a smaller one's noise)
        raise ValueError(f"row seeds must be in [0, 2**63-1], got {min(seeds)}..{max(seeds)}")
    return seeds

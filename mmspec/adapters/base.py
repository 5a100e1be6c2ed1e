"""What the decode loop needs from a target (or draft) model.

A `Target` opens a `Session` for one generation: the condition is embedded and prefilled, the
session owns its KV cache, and with CFG it runs the null condition as a second half of the batch.
Generated tokens are addressed by their index in the layout; index -1 is the condition's last
element (a class embedding, the last prompt token...), which the session feeds itself.
"""
from __future__ import annotations

from typing import Any, Protocol

import torch

from mmspec.layouts import Layout


class Session(Protocol):
    batch_size: int
    vocab_size: int
    device: torch.device
    prompt: list[torch.Tensor] | None  # per row: ids in the target vocabulary before generation, if any
    # optional: draft_vocab, a tensor of the ids random drafts should come from (e.g. visual tokens only)

    def forward(self, tokens: torch.Tensor, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tokens [B, L] at generated indices start[b] .. start[b]+L-1 -> logits for the next index of
        each: (cond [B, L, V], null-condition [B, L, V] or None without CFG). The cache keeps what lies
        before `start`; everything from `start` on is (re)written, so a rejection is a pointer move."""
        ...


class Target(Protocol):
    vocab_size: int

    def session(self, condition: Any, layout: Layout, *, cfg: bool, num_samples: int,
                max_window: int) -> Session:
        ...


def repeat_condition(condition: torch.Tensor, num_samples: int) -> torch.Tensor:
    """[C, ...] conditions -> [C * num_samples, ...]: row i is sample i % num_samples of condition i // num_samples."""
    return condition.repeat_interleave(num_samples, dim=0)


def window_index(start: torch.Tensor, width: int) -> torch.Tensor:
    """[B] start indices -> [B, width] generated indices."""
    return start[:, None] + torch.arange(width, device=start.device)

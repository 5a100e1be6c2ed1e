"""Drafter protocol: propose L-1 tokens for the window, each with the law q it was drawn from."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from mmspec.state import DecodeState
    from mmspec.verify import Verdict


@dataclass
class Draft:
    tokens: torch.Tensor  # [B, L-1] draft for indices n .. n+L-2
    q: torch.Tensor  # [B, L-1, V] fp32: the law each draft token was drawn from, given all before it


class Drafter(Protocol):
    def start(self, state: "DecodeState") -> None:
        """Called once, after the target session is open and before the first propose."""

    def propose(self, state: "DecodeState") -> Draft:
        ...

    def update(self, state: "DecodeState", draft: Draft, verdict: "Verdict", logp: torch.Tensor,
               k: torch.Tensor) -> None:
        """Observe the outcome: p over the window (logp [B, L, V]) and k [B] tokens committed
        (already written to state.seq, state.n moved on)."""


class NoDraft:
    """Plain AR decoding: nothing to draft, the window is the single next position."""

    def start(self, state):
        pass

    def propose(self, state):
        B, V = state.batch_size, state.vocab_size
        return Draft(state.seq.new_zeros(B, 0), torch.zeros(B, 0, V, device=state.seq.device))

    def update(self, state, draft, verdict, logp, k):
        pass

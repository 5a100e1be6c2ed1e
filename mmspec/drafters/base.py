"""Drafter protocol: propose L-1 tokens for the window, each with the law q it was drawn from."""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

from mmspec.steps import Draft, Verdict

if TYPE_CHECKING:
    from mmspec.state import DecodeState


class Drafter(Protocol):
    def start(self, state: "DecodeState") -> None:
        """Called once, after the target session is open and before the first propose."""

    def propose(self, state: "DecodeState") -> Draft:
        """L-1 drafts for indices n .. n+L-2, where L = state.window may change from step to step."""
        ...

    def update(self, state: "DecodeState", draft: Draft, verdict: Verdict, logp: torch.Tensor,
               k: torch.Tensor) -> None:
        """Observe the outcome: p over the window (logp [B, L, V]) and k [B] tokens committed
        (already written to state.seq, state.n moved on)."""


class NoDraft:
    """Plain AR decoding: nothing to draft, the window is the single next position (or a run of forced ones)."""

    def start(self, state):
        pass

    def propose(self, state):
        # L > 1 only over forced tokens, which replace these placeholders
        return Draft.copied(state.seq.new_zeros(state.batch_size, state.window - 1))

    def update(self, state, draft, verdict, logp, k):
        pass

"""Drafter protocol: propose L-1 tokens for the window, each with the law q it was drawn from."""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from mmspec.steps import CHAIN, Context, Draft, DraftRecord, Verdict, Window

if TYPE_CHECKING:
    from mmspec.state import DecodeState


class Drafter(Protocol):
    makes: frozenset[str]  # the kinds of draft record it proposes (mmspec.steps: CHAIN, BRANCHES, TOKEN_TREE)

    def start(self, state: "DecodeState", context: Context) -> None:
        """Called once, after the target session is open and before the first propose, with what the drafter may
        need beyond the decode state (the condition, the prompt's ids, the draft vocabulary)."""

    def propose(self, state: "DecodeState", window: Window) -> DraftRecord:
        """Drafts for the D = window.D slots n .. n+L-2 of the step's window (L may change from step to step): a chain
        (`Draft`), a chain with branches or a token tree, for the method's verifier. A drafter may return fewer (a
        lookup with nothing to look up): the step then verifies a window of as many drafts plus one."""
        ...

    def update(self, state: "DecodeState", draft: DraftRecord, verdict: Verdict, logp: torch.Tensor,
               k: torch.Tensor) -> None:
        """Observe the outcome: p over the window (logp [B, L, V]) and k [B] tokens committed
        (already written to state.seq, state.n moved on)."""


@runtime_checkable
class Admits(Protocol):
    """A drafter whose rows can start over mid-generation (mmspec.engine: a new request's rows in the places of rows
    that finished), where `admits` (a wrapper admits when what it wraps does)."""

    admits: bool

    def admit(self, state: "DecodeState", rows: torch.Tensor, context: Context) -> None:
        """After the state admitted rows `rows` [b] (nothing committed, their own streams): forget what they held.
        context: the new rows' (`prompt` holds theirs alone, in order)."""


def admits(drafter) -> bool:
    """Whether rows of `drafter`'s generation may join mid-generation."""
    return isinstance(drafter, Admits) and drafter.admits


class NoDraft:
    """Plain AR decoding: nothing to draft, the window is the single next position (or a run of forced ones)."""

    makes = frozenset({CHAIN})
    admits = True

    def start(self, state, context):
        pass

    def admit(self, state, rows, context):
        pass

    def propose(self, state, window):
        # D > 0 only over forced tokens, which replace these placeholders
        return Draft.copied(state.seq.new_zeros(state.batch_size, window.D))

    def update(self, state, draft, verdict, logp, k):
        pass

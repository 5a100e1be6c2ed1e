"""A window's first slots from one drafter, the rest from another: the head, which sees the token the last step
corrected, then a Jacobi window that carries its drafts on (eagle's `jacobi` option)."""
from __future__ import annotations

import torch

from mmspec.drafters.base import Drafter
from mmspec.steps import CHAIN, Draft


class SplicedDrafter:
    """The first `slots` drafts of a window from `first`, the others from `rest`; both see every outcome.

    Lossless as each part is: the verifier tests every slot's draft under its own q, and the two parts draw
    from separate randomness, so a slot's draft is distributed as its q given everything before it."""

    makes = frozenset({CHAIN})

    def __init__(self, first: Drafter, rest: Drafter, slots: int):
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.first, self.rest, self.slots = first, rest, slots

    def start(self, state, context):
        self.first.start(state, context)
        self.rest.start(state, context)

    def propose(self, state, window):
        rest = self.rest.propose(state, window)
        head = self.first.propose(state, window.asking(min(self.slots, rest.slots) + 1))
        h = head.slots  # (0 before the head has features)
        if h == 0:
            return rest
        if rest.slots == h:
            return head
        q = None
        if head.q is not None or rest.q is not None:
            V = (head.q if head.q is not None else rest.q).shape[2]
            zeros = lambda d: d.tokens.new_zeros(*d.tokens.shape, V, dtype=torch.float32)  # noqa: E731
            q = torch.cat([head.q if head.q is not None else zeros(head), (rest.q if rest.q is not None else zeros(rest))[:, h:]], 1)
        return Draft(torch.cat([head.tokens, rest.tokens[:, h:]], 1), q, torch.cat([head.onehot, rest.onehot[:, h:]], 1))

    def update(self, state, draft, verdict, logp, k):
        self.first.update(state, draft, verdict, logp, k)
        self.rest.update(state, draft, verdict, logp, k)

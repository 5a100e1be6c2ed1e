"""Lookup drafts: every step, all L-1 slots come from a fill policy (n-gram, row above, previous frame).

`LookupOrDrafter` takes a lookup's drafts in the steps where a judge (a draft head) agrees with them, and another
drafter's in the rest: the head's, which needs a forward of its own per slot, where a lookup costs next to nothing.
"""
from __future__ import annotations

from typing import Protocol

import torch

from mmspec.drafters.base import Drafter
from mmspec.drafters.fill import Fill, MatchingFill
from mmspec.steps import CHAIN, Draft


class LookupDrafter:
    makes = frozenset({CHAIN})
    admits = True

    def __init__(self, fill: Fill):
        self.fill = fill

    def start(self, state, context):
        self.fill.start(state, context)

    def admit(self, state, rows, context):
        self.fill.admit(state, rows, context)

    def propose(self, state, window):
        L = window.L
        if L == 1:
            return Draft.copied(state.draft_tokens(1))
        self.fill(state, state.n, L)
        evidence = self.fill.evidence if isinstance(self.fill, MatchingFill) else None
        if evidence is not None:
            # slots after a row's matched n-gram hold guesses (copies of the left token) that rarely pass: verify only
            # the longest match of the batch (plain AR where nothing matched), as prompt lookup does, or the run of
            # forced tokens ahead, which a window over them commits whatever was drafted
            useful = int(evidence.masked_fill(~state.active, 0).max())
            L = min(L, max(useful, state.forced_ahead()) + 1)
        return Draft.copied(state.draft_tokens(L))

    def update(self, state, draft, verdict, logp, k):
        pass


class Judge(Protocol):
    def next_logq(self, state) -> "torch.Tensor | None":
        """[B, V] log q of the next index n given the committed tokens only (no draw of this step), or None
        where the judge has nothing to say yet."""
        ...


class LookupOrDrafter:
    """Per row, the lookup's drafts in a step where the lookup matched and its first draft is the judge's most likely
    token at index n (or the judge has no view yet), `other`'s drafts in the rest. When every active row takes the
    lookup, `other` does not draft at all; a row that takes it in a step where others do not keeps the other's
    drafts after the lookup's (a token tree is not mixed: it drafts for every row unless all take the lookup).

    On code a head drafts 3-4 tokens per forward from its own chain of head forwards, while a lookup that hits
    a copy of earlier text drafts as many at no cost; but a lookup's copy is often wrong where the text departs
    from what it copies, most of all when sampling. The judge's view of the first slot tells the two apart: the
    lookup drafts only where the head would have begun the same way.

    Lossless: which drafter drafts a row is a function of its committed tokens (the lookup's match and the judge's
    q at n, computed from them before the step draws anything), so each slot's draft has the law its own drafter
    reports (one-hot for the lookup's copies) given everything before it, also a head's draft after the lookup's
    (drawn from the head's q with its own uniform). `other` sees every outcome, also of the lookup's steps (a head
    writes the committed tokens into its cache). But a row's draws are not its own alone, as they are with one
    drafter: in a step where every row takes the lookup, `other` draws nothing, where one row declines it draws for
    all, so a row's sampled tokens (never their law, nor `exact`'s) depend on its batch."""

    def __init__(self, lookup: LookupDrafter, other: Drafter, judge: Judge):
        self.lookup, self.other, self.judge = lookup, other, judge
        self.makes = lookup.makes | other.makes

    def start(self, state, context):
        self.lookup.start(state, context)
        self.other.start(state, context)

    def propose(self, state, window):
        lookup = self.lookup.propose(state, window)
        if lookup.slots == 0:
            return self.other.propose(state, window)
        take = state.active.clone()  # [B] rows that take the lookup's drafts
        evidence = self.lookup.fill.evidence if isinstance(self.lookup.fill, MatchingFill) else None
        if evidence is not None:
            take &= evidence > 0
        logq = self.judge.next_logq(state)  # [B, V]
        if logq is not None:
            take &= logq.argmax(-1) == lookup.tokens[:, 0]
        if bool((take | ~state.active).all()):
            return lookup
        draft = self.other.propose(state, window)
        if not take.any() or draft.tree is not None or draft.slots < lookup.slots:
            return draft
        D = lookup.slots
        mixed = take[:, None] & (torch.arange(draft.slots, device=take.device) < D)  # [B, L-1] the lookup's slots
        tokens = torch.where(mixed, torch.cat([lookup.tokens, draft.tokens[:, D:]], 1), draft.tokens)
        return Draft(tokens, draft.q, draft.onehot | mixed)

    def update(self, state, draft, verdict, logp, k):
        self.other.update(state, draft, verdict, logp, k)

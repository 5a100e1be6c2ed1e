"""Lookup drafts: every step, all L-1 slots come from a fill policy (n-gram, row above, previous frame)."""
from __future__ import annotations

from mmspec.drafters.fill import Fill
from mmspec.steps import Draft


class LookupDrafter:
    def __init__(self, fill: Fill):
        self.fill = fill

    def start(self, state, context):
        self.fill.start(state, context)

    def propose(self, state, L):
        if L == 1:
            return Draft.copied(state.draft_tokens(1))
        self.fill(state, state.n, L)
        evidence = getattr(self.fill, "evidence", None)
        if evidence is not None:
            # slots after a row's matched n-gram hold guesses (copies of the left token) that rarely pass: verify only
            # the longest match of the batch (plain AR where nothing matched), as prompt lookup does, or the run of
            # forced tokens ahead, which a window over them commits whatever was drafted
            useful = int(evidence.masked_fill(~state.active, 0).max())
            L = min(L, max(useful, state.forced_ahead()) + 1)
        return Draft.copied(state.draft_tokens(L))

    def update(self, state, draft, verdict, logp, k):
        pass

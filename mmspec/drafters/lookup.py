"""Lookup drafts: every step, all L-1 slots come from a fill policy (n-gram, row above, previous frame)."""
from __future__ import annotations

from mmspec.drafters.fill import Fill
from mmspec.steps import Draft


class LookupDrafter:
    def __init__(self, fill: Fill):
        self.fill = fill

    def start(self, state):
        pass

    def propose(self, state):
        if state.window > 1:
            self.fill(state, state.n)
        return Draft.copied(state.draft_tokens())

    def update(self, state, draft, verdict, logp, k):
        pass

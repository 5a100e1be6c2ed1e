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
        if state.window == 1:
            return Draft.copied(state.draft_tokens())
        self.fill(state, state.n)
        draft = Draft.copied(state.draft_tokens())
        # slots after a row's matched n-gram hold guesses (copies of the left token) that rarely pass: the
        # loop verifies only the longest match of the batch (plain AR where nothing matched), as prompt lookup does
        draft.useful = getattr(self.fill, "evidence", None)
        return draft

    def update(self, state, draft, verdict, logp, k):
        pass

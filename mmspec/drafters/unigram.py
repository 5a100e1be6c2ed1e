"""Unigram drafts: every slot of the window drawn from the row's own token frequencies so far.

Images and video repeat a few tokens over flat regions and backgrounds, so the tokens a row has committed are a
cheap guess at the next ones. Each slot is drawn from q = (counts + a) / (n + a V): the row's committed tokens
counted, `a` added to every token so that no token has q = 0. q depends only on committed tokens, so every draft
is drawn from q given everything before it, and rejection sampling keeps the target's law.
"""
from __future__ import annotations

import torch

from mmspec.sampling import sample_from
from mmspec.steps import CHAIN, Draft


class UnigramDrafter:
    makes = frozenset({CHAIN})
    admits = True  # (its q is counted from the row's committed tokens at every step)

    def __init__(self, smoothing: float = 1.0):
        self.smoothing = smoothing

    def start(self, state, context):
        pass

    def admit(self, state, rows, context):
        pass

    def propose(self, state, window):
        B, D, V = state.batch_size, window.D, state.vocab_size
        if D == 0:  # plain AR: nothing to draft
            return Draft.copied(state.seq.new_zeros(B, 0))
        N = state.length
        committed = torch.arange(N, device=state.seq.device) < state.n[:, None]  # [B, N]
        counts = torch.zeros(B, V, device=state.seq.device).scatter_add_(
            1, state.seq[:, :N].clamp(min=0), committed.float())  # [B, V]
        q = (counts + self.smoothing) / (counts.sum(1, keepdim=True) + self.smoothing * V)  # [B, V]
        q = q[:, None].expand(B, D, V).contiguous()  # [B, D, V]: the same law at every slot
        tokens = sample_from(q, state.streams.uniform(D).to(q.device))  # [B, D]
        return Draft(tokens, q, torch.zeros(B, D, dtype=torch.bool, device=q.device))

    def update(self, state, draft, verdict, logp, k):
        pass

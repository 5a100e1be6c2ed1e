"""A small AR model drafts L-1 tokens one by one (Leviathan et al. / Chen et al. 2023).

The draft model keeps its own session and cache. Each propose re-feeds the last two committed
tokens (the second-to-last rewrites an identical cache entry), which brings its cache up to date
whatever was accepted, with the same two-token width for every row.
"""
from __future__ import annotations

import torch

from mmspec.adapters.base import Target
from mmspec.sampling import Sampling, sample_from
from mmspec.state import DecodeState
from mmspec.steps import Draft


class DraftModelDrafter:
    def __init__(self, model: Target, sampling: Sampling | dict | None = None):
        self.model = model
        self.sampling = None if sampling is None else Sampling.coerce(sampling)
        self.session = None

    def start(self, state: DecodeState):
        if self.model.vocab_size != state.vocab_size:
            raise ValueError(f"draft model vocabulary {self.model.vocab_size} != target vocabulary {state.vocab_size}")
        self._sampling = self.sampling or state.sampling
        self.session = self.model.session(state.condition, state.layout, cfg=self._sampling.cfg,
                                          num_samples=state.num_samples, max_window=state.max_window + 1)

    def propose(self, state: DecodeState) -> Draft:
        B, L = state.batch_size, state.window
        if L == 1:
            return Draft.copied(state.seq.new_zeros(B, 0))
        if int(state.n.max()) == 0:  # first window: only the condition's last element to feed
            start, tokens = state.n - 1, state.pending[:, None]
        else:
            start = (state.n - 2).clamp(min=-1)
            prev = state.seq.gather(1, (state.n - 2).clamp(min=0)[:, None])
            tokens = torch.cat([prev, state.pending[:, None]], 1)
        u = state.streams.uniform(L - 1).to(state.seq.device)
        drafts, qs = [], []
        for j in range(L - 1):
            logits = self.session.forward(tokens, start)
            q = self._sampling.logp(logits[0][:, -1], None if logits[1] is None else logits[1][:, -1]).exp()
            forced = state.structural(state.n + j)  # structural tokens are fed as they will be (the loop marks them one-hot)
            d = torch.where(forced >= 0, forced, sample_from(q, u[:, j]))
            drafts.append(d)
            qs.append(q)
            start, tokens = start + tokens.shape[1], d[:, None]
        tokens = torch.stack(drafts, 1)
        return Draft(tokens, torch.stack(qs, 1), torch.zeros_like(tokens, dtype=torch.bool))

    def update(self, state, draft, verdict, logp, k):
        pass

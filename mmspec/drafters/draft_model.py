"""A small AR model drafts L-1 tokens one by one (Leviathan et al. / Chen et al. 2023).

The draft model keeps its own session and cache. Each propose first feeds the committed tokens its
cache does not hold yet (usually the last one or two: a correction or bonus token, or several
after steps whose window was 1 and so drafted nothing), with one width for every row; rows that
need fewer re-feed tokens they already hold, which rewrites identical cache entries.
"""
from __future__ import annotations

import torch

from mmspec.adapters.base import Target, window_index
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
        self.synced = torch.full_like(state.n, -1)  # [B] the draft cache holds committed indices < synced
        self.fed = None  # [B] indices < fed were fed by the last propose (None: it drafted nothing)

    def propose(self, state: DecodeState) -> Draft:
        B, L = state.batch_size, state.window
        self.fed = None
        if L == 1:
            return Draft.copied(state.seq.new_zeros(B, 0))
        width = int((state.n - self.synced).max())  # indices synced .. n-1, the last one `pending`
        start = (state.n - width).clamp(min=-1)  # only done rows can clamp: their drafts are ignored
        tokens = state.seq.gather(1, window_index(start, width).clamp(min=0))  # index -1: the session's own
        u = state.streams.uniform(L - 1).to(state.seq.device)
        drafts, qs = [], []
        for j in range(L - 1):
            logits = self.session.forward(tokens, start)
            q = self._sampling.logp(logits[0][:, -1], None if logits[1] is None else logits[1][:, -1]).exp()
            forced = state.structural(state.index(1, j))[:, 0]  # forced tokens are fed as they will be (one-hot q)
            d = torch.where(forced >= 0, forced, sample_from(q, u[:, j]))
            drafts.append(d)
            qs.append(q)
            start, tokens = start + tokens.shape[1], d[:, None]
        self.fed = state.n + L - 2  # drafts d_0 .. d_{L-3} went through the draft model, d_{L-2} did not
        tokens = torch.stack(drafts, 1)
        return Draft(tokens, torch.stack(qs, 1), torch.zeros_like(tokens, dtype=torch.bool))

    def update(self, state, draft, verdict, logp, k):
        if self.fed is not None:  # accepted drafts stay valid; the correction / bonus at n-1 was never fed
            self.synced = torch.minimum(state.n - 1, self.fed)

"""A small AR model drafts L-1 tokens one by one (Leviathan et al. / Chen et al. 2023).

The draft model keeps its own session and cache. Each propose first feeds the committed tokens its
cache does not hold yet (usually the last one or two: a correction or bonus token, or several
after steps whose window was 1 and so drafted nothing), one span for every row; rows that
need fewer re-feed tokens they already hold, which rewrites identical cache entries.
"""
from __future__ import annotations

import torch

from mmspec.adapters.base import Target, window_index
from mmspec.tree import forest
from mmspec.sampling import Sampling, sample_from
from mmspec.state import DecodeState
from mmspec.steps import CHAIN, Context, Draft, Window


class DraftModelDrafter:
    makes = frozenset({CHAIN})

    def __init__(self, model: Target, sampling: Sampling | dict | None = None, tree_nodes: int = 0):
        """tree_nodes: nodes proactive branches add to a window at most (the draft cache has room for them)."""
        self.model, self.tree_nodes = model, tree_nodes
        self.sampling = None if sampling is None else Sampling.coerce(sampling)
        self.session = None

    def start(self, state: DecodeState, context: Context):
        if self.model.vocab_size != state.vocab_size:
            raise ValueError(f"draft model vocabulary {self.model.vocab_size} != target vocabulary {state.vocab_size}")
        self._sampling = self.sampling or state.sampling
        session = self.model.session(context.condition, state.layout, cfg=self._sampling.cfg,
                                     num_samples=context.num_samples, max_window=state.max_window + 1 + self.tree_nodes)
        self.session = context.rows.narrow(session)  # rows that are done leave its forwards, as the target's
        self.synced = torch.full_like(state.n, -1)  # [B] the draft cache holds committed indices < synced
        self.fed = None  # [B] indices < fed were fed by the last propose (None: it drafted nothing)

    def propose(self, state: DecodeState, window: Window) -> Draft:
        B, L = state.batch_size, window.L
        self.fed = None
        if L == 1:
            return Draft.copied(state.seq.new_zeros(B, 0))
        span = int((state.n - self.synced).max())  # indices synced .. n-1 (the last one `pending`)
        # a row that needs fewer than `span` tokens may reach back past index -1 (early rows, when another
        # row re-feeds a proactive branch): it starts at -1 instead, and its pending token sits at column n - start - 1
        start = (state.n - span).clamp(min=-1)
        tokens = state.seq.gather(1, window_index(start, span).clamp(min=0))  # [B, span] (index -1: the session's own)
        column = (state.n - 1 - start).clamp(max=span - 1)[:, None, None]  # [B, 1, 1]
        u = state.streams.uniform(L - 1).to(state.seq.device)
        drafts, qs = [], []
        for j in range(L - 1):
            cond, null = self.session.forward(tokens, start)
            pick = lambda x: x.gather(1, column.expand(-1, 1, x.shape[2]))[:, 0]  # noqa: E731  [B, V]
            q = self._sampling.logp(pick(cond), None if null is None else pick(null)).exp()
            forced = state.structural(state.index(1, j))[:, 0]  # forced tokens are fed as they will be (one-hot q)
            d = torch.where(forced >= 0, forced, sample_from(q, u[:, j]))
            drafts.append(d)
            qs.append(q)
            start, tokens, column = state.n + j, d[:, None], torch.zeros_like(column)
        self.fed = state.n + L - 2  # drafts d_0 .. d_{L-3} went through the draft model, d_{L-2} did not
        tokens = torch.stack(drafts, 1)
        return Draft(tokens, torch.stack(qs, 1), torch.zeros_like(tokens, dtype=torch.bool))

    def continue_branches(self, state: DecodeState, siblings: torch.Tensor, D: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Siblings [B, S] of d_0, each continued by the draft model itself: D-1 forwards over all branches at
        once (a forest from index n) -> branches [B, S, D], their children's laws [B, S, D-1, V] (None if D == 1)."""
        B, S = siblings.shape
        nodes = siblings[..., None]  # [B, S, 1]
        u = state.streams.uniform(S, D - 1).to(nodes.device)
        qs = []
        for t in range(1, D):
            cond, null = self.session.forward(nodes.flatten(1), state.n, forest(S, t, nodes.device))  # [B, S * t, V]
            last = lambda x: x.view(B, S, t, -1)[:, :, -1]  # noqa: E731  [B, S, V] the deepest node of each branch
            q = self._sampling.logp(last(cond), None if null is None else last(null)).exp()
            qs.append(q)
            nodes = torch.cat([nodes, sample_from(q, u[:, :, t - 1])[..., None]], 2)
        if D > 1:
            self.fed = state.n.clone()  # the forest overwrote the chain's drafts in the draft cache
        return nodes, torch.stack(qs, 2) if qs else None

    def update(self, state, draft, verdict, logp, k):
        if self.fed is not None:  # accepted drafts stay valid; the correction / bonus at n-1 was never fed
            self.synced = torch.minimum(state.n - 1, self.fed)
            if verdict.branch is not None:  # a branch's tokens were never fed: valid up to the old pending
                self.synced = torch.where(verdict.branch > 0, state.n - k, self.synced)

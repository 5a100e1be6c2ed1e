"""Proactive drafting (SJD-PAC): alternatives for the window's first draft, each with children.

The first slot of a Jacobi window follows the token the last verification corrected, so its draft
was drawn under a p that saw a different token there: it fails most often (its q is furthest from
the new p). K-1 siblings beside it, each heading a branch of D-1 children for the next slots, give
the verifier more chances there, and one forward computes p along every branch (mmspec.tree).

What a sibling may be depends on the verifier:
- rejection verifiers (recursive rejection sampling) need siblings drawn without replacement from
  slot 0's q after its draft, and children drawn afresh from their slot's q, independently of
  anything the verifier decides: `FreshBranches`;
- `exact` accepts a token only when it equals AR's, so any alternative keeps it exact; the best bets
  are the runners-up of slot 0's own Gumbel-max draw, and the chain's drafts as children: `NoiseBranches`.
"""
from __future__ import annotations

import torch

from mmspec.sampling import sample_from
from mmspec.state import DecodeState
from mmspec.steps import Draft


class Branches:
    def __init__(self, width: int = 4, depth: int = 3):
        if width < 2 or depth < 1:
            raise ValueError(f"proactive drafting needs width >= 2 (the draft and a sibling) and depth >= 1, "
                             f"got width {width}, depth {depth}")
        self.siblings, self.depth = width - 1, depth

    @property
    def nodes(self) -> int:
        """Window nodes the branches add at most: (width - 1) * depth."""
        return self.siblings * self.depth

    def __call__(self, state: DecodeState, draft: Draft) -> torch.Tensor | None:
        """-> [B, S, D] branches for this window (D capped by its drafts), or None when slot 0 has no q."""
        D = min(self.depth, draft.tokens.shape[1])
        if draft.q is None or D < 1:
            return None
        siblings = self.siblings_of(state, draft)  # [B, S]
        return torch.cat([siblings[..., None], self._children(state, draft, D)], 2)

    def siblings_of(self, state: DecodeState, draft: Draft) -> torch.Tensor:
        raise NotImplementedError

    def _children(self, state: DecodeState, draft: Draft, depth: int) -> torch.Tensor:
        raise NotImplementedError


class FreshBranches(Branches):
    def siblings_of(self, state, draft):
        q = draft.q[:, 0].scatter(-1, draft.tokens[:, :1], 0.0)  # [B, V]
        u = state.streams.uniform(self.siblings).to(q.device)
        out = []
        # one at a time, without replacement (a q out of mass gives a token it cannot have drawn: the verifier skips it)
        for i in range(self.siblings):
            s = sample_from(q, u[:, i])
            out.append(s)
            q = q.scatter(-1, s[:, None], 0.0)
        return torch.stack(out, 1)

    def _children(self, state, draft, depth):
        B, S = draft.tokens.shape[0], self.siblings
        q = draft.q[:, None, 1:depth].expand(-1, S, -1, -1)  # [B, S, D-1, V]
        drawn = sample_from(q, state.streams.uniform(S, depth - 1).to(q.device))
        own = draft.tokens[:, None, 1:depth].expand(B, S, -1)  # a one-hot slot's token is its only draw
        return torch.where(draft.onehot[:, None, 1:depth], own, drawn)


class NoiseBranches(Branches):
    def siblings_of(self, state, draft):
        scores = draft.q[:, 0].log() + state.streams.gumbel(state.index(1))[:, 0].to(draft.q.device)  # [B, V]
        scores.scatter_(-1, draft.tokens[:, :1], -torch.inf)
        return scores.topk(self.siblings, -1).indices

    def _children(self, state, draft, depth):
        return draft.tokens[:, None, 1:depth].expand(-1, self.siblings, -1)

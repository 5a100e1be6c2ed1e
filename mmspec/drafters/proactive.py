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
  are the runners-up of slot 0's own Gumbel-max draw, and the chain's drafts as children: `NoiseBranches`;
- a draft model or head continues every sibling itself, and each child is tested under its own q:
  `ModelBranches`; with `exact` the siblings are NoiseBranches' runners-up, each continued by the drafter
  (its children its own Gumbel-max draws): `NoiseModelBranches`.

`ProactiveDrafter` wraps any chain drafter with a kind of branches and returns a `TreeDraft`; the
verifier that reads it is `mmspec.verify.BranchVerifier` around the method's chain verifier.
"""
from __future__ import annotations

import torch

from mmspec.drafters.base import Drafter, admits
from mmspec.sampling import sample_from
from mmspec.state import DecodeState
from mmspec.steps import BRANCHES, CHAIN, Draft, TreeDraft
from mmspec.tree import proactive_tree


class Branches:
    def __init__(self, candidates: int = 4, depth: int = 3):
        """SJD-PAC's (width, depth): `candidates` at slot 0 (the chain's draft and its siblings), each heading a
        branch of `depth` nodes."""
        if candidates < 2 or depth < 1:
            raise ValueError(f"proactive drafting needs width >= 2 (candidates at slot 0: the draft and a sibling) and "
                             f"depth >= 1, got width {candidates}, depth {depth}")
        self.siblings, self.depth = candidates - 1, depth

    @property
    def nodes(self) -> int:
        """Window nodes the branches add at most: siblings * depth."""
        return self.siblings * self.depth

    def grow(self, state: DecodeState, draft: Draft, chain: Drafter) -> "Draft | TreeDraft":
        """The chain's draft with branches at slot 0 (D capped by its drafts), or the chain alone when slot 0 has
        no q to branch from."""
        L, D = draft.tokens.shape[1] + 1, min(self.depth, draft.tokens.shape[1])
        if draft.q is None or D < 1:
            return draft
        branches, branch_q = self.branches(state, draft, chain, D)  # [B, S, D], [B, S, D-1, V] or None
        return TreeDraft(draft, branches, branch_q, proactive_tree(L, self.siblings, D, branches.device))

    def branches(self, state: DecodeState, draft: Draft, chain: Drafter, D: int):
        raise NotImplementedError


class FreshBranches(Branches):
    def siblings_of(self, state: DecodeState, draft: Draft) -> torch.Tensor:
        """[B, S] siblings drawn one at a time without replacement from slot 0's q, d_0 excluded (a q out of mass
        gives a token it cannot have drawn: the verifier skips it)."""
        q = draft.q[:, 0].scatter(-1, draft.tokens[:, :1], 0.0)  # [B, V]
        u = state.streams.uniform(self.siblings).to(q.device)
        out = []
        for i in range(self.siblings):
            s = sample_from(q, u[:, i])
            out.append(s)
            q = q.scatter(-1, s[:, None], 0.0)
        return torch.stack(out, 1)

    def branches(self, state, draft, chain, D):
        B, S = draft.tokens.shape[0], self.siblings
        siblings = self.siblings_of(state, draft)
        q = draft.q[:, None, 1:D].expand(-1, S, -1, -1)  # [B, S, D-1, V]
        drawn = sample_from(q, state.streams.uniform(S, D - 1).to(q.device))
        own = draft.tokens[:, None, 1:D].expand(B, S, -1)  # a one-hot slot's token is its only draw
        children = torch.where(draft.onehot[:, None, 1:D], own, drawn)
        return torch.cat([siblings[..., None], children], 2), None


class ModelBranches(FreshBranches):
    """Siblings as FreshBranches; the chain's drafter (a draft model) continues each one itself."""

    def branches(self, state, draft, chain, D):
        return chain.continue_branches(state, self.siblings_of(state, draft), D)


class NoiseBranches(Branches):
    def siblings_of(self, state: DecodeState, draft: Draft) -> torch.Tensor:
        """[B, S] the runners-up of slot 0's Gumbel-max draw on its own noise row, d_0 excluded."""
        scores = draft.q[:, 0].log() + state.streams.gumbel(state.index(1))[:, 0].to(draft.q.device)  # [B, V]
        scores.scatter_(-1, draft.tokens[:, :1], -torch.inf)
        return scores.topk(self.siblings, -1).indices

    def branches(self, state, draft, chain, D):
        children = draft.tokens[:, None, 1:D].expand(-1, self.siblings, -1)
        return torch.cat([self.siblings_of(state, draft)[..., None], children], 2), None


class NoiseModelBranches(NoiseBranches):
    """Siblings as NoiseBranches (`exact`); the chain's drafter (a draft head drawing Gumbel-max) continues each."""

    def branches(self, state, draft, chain, D):
        return chain.continue_branches(state, self.siblings_of(state, draft), D)


class ProactiveDrafter:
    """A chain drafter with proactive branches at the first slot of every window it drafts (its chain alone where slot
    0 has no law to branch from)."""

    makes = frozenset({CHAIN, BRANCHES})

    def __init__(self, chain: Drafter, branches: Branches):
        self.chain, self.branches = chain, branches
        self.admits = admits(chain)  # (branches keep nothing of a row between steps)

    def start(self, state, context):
        self.chain.start(state, context)

    def admit(self, state, rows, context):
        self.chain.admit(state, rows, context)

    def propose(self, state, window):
        return self.branches.grow(state, self.chain.propose(state, window), self.chain)

    def update(self, state, draft, verdict, logp, k):
        self.chain.update(state, draft.chain, verdict, logp, k)

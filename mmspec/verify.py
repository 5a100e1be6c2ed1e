"""Verifiers: turn the target's p over a window and the drafts into one output token per slot.

Slot j < L-1 holds a draft d_j with its law q_j; slot L-1 has no draft (bonus). The loop commits
slots up to and including the first rejected one; later slots feed the drafter (coupled drafting).
The chain verifiers (`RejectionVerifier`, `GumbelMatchVerifier`) are the plain accept/reject step.
`BranchVerifier` wraps one of them for tree drafts (proactive branches, mmspec.tree): slot 0 has
alternatives; when d_0 fails, the chain verifier's own sibling test picks one of them, which continues
along its own branch of children, whose p the same forward computed and which the chain verifier tests
as a chain of its own. The verdict carries that path's tokens at the slots it committed and the chain's
everywhere else (what the drafter carries on was drawn under the chain's p).
`TreeVerifier` wraps one of them for token trees (`TokenTree`: children chosen, not drawn): at each node of
the path it takes AR's draw there, argmax(log p + g) on the index's noise row, and descends into the child
that equals it; where none does, that draw is the correction.
"""
from __future__ import annotations

from typing import Protocol

import torch

from mmspec.sampling import sample_from
from mmspec.state import DecodeState
from mmspec.steps import BRANCHES, CHAIN, TOKEN_TREE, Draft, DraftRecord, TokenTree, Verdict


class Verifier(Protocol):
    reads: frozenset[str]  # the kinds of draft record it verifies (mmspec.steps: CHAIN, BRANCHES, TOKEN_TREE)
    same_tokens: bool  # whether a row's tokens are its seed's AR draws whatever the windows (else: AR's law)

    def __call__(self, state: DecodeState, draft: DraftRecord, logp: torch.Tensor, L: int) -> Verdict:
        """p over the forward's nodes (logp [B, W, V]: the window's L slots, then any tree nodes) -> the verdict
        on the window of L slots at indices n .. n+L-1."""
        ...


class ChainVerifier(Protocol):
    reads: frozenset[str]  # as a Verifier's: a chain verifier is one too
    reads_q: bool  # whether its test reads the drafts' laws q (a drafter need not keep them otherwise)

    def __call__(self, state: DecodeState, draft: Draft, logp: torch.Tensor, L: int) -> Verdict:
        ...

    def chain(self, state: DecodeState, draft: Draft, logp: torch.Tensor, index: torch.Tensor) -> Verdict:
        """Drafts [B, W] at indices index[:, :W] and p at every index (logp [B, W+1, V]) -> outputs [B, W+1]."""
        ...

    def siblings(self, state: DecodeState, draft: Draft, logp0: torch.Tensor, verdict: Verdict,
                 siblings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Slot 0 had candidates siblings [B, S] beside d_0 (p there: logp0 [B, V]) -> (slot 0's output [B],
        chosen [B]: 1 + the sibling accepted, 0 where d_0 itself was or none was)."""
        ...


def rejection_sample(d: torch.Tensor, q: torch.Tensor | None, p: torch.Tensor, u_accept: torch.Tensor,
                     u_residual: torch.Tensor, onehot: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Modified rejection sampling, per slot: d [..], q, p [.., V] fp32, uniforms [..] -> (y, accepted).

    Accept d with probability min(1, p(d)/q(d)); otherwise draw from norm(max(0, p - q)), computed
    exactly (no epsilon): if d ~ q then y ~ p, and P(y = d) = 1 - TV(p, q), the maximal coupling.
    Where `onehot` [..] is set (or everywhere when q is None), q is one-hot on d: the same rule then
    reads accept with probability p(d), else draw from p with d removed.
    """
    pd = p.gather(-1, d[..., None]).squeeze(-1)
    if q is None:
        qd, residual = torch.ones_like(pd), p.scatter(-1, d[..., None], 0.0)
    else:
        qd, residual = q.gather(-1, d[..., None]).squeeze(-1), (p - q).clamp(min=0)
        if onehot is not None:
            qd = qd.masked_fill(onehot, 1.0)
            residual = torch.where(onehot[..., None], p, residual)
            residual.scatter_(-1, d[..., None], residual.gather(-1, d[..., None]).masked_fill(onehot[..., None], 0.0))
    accepted = u_accept * qd < pd
    empty = residual.sum(-1, keepdim=True) == 0  # p == q: no rejection is possible, keep p for safety
    residual = torch.where(empty, p, residual)
    return torch.where(accepted, d, sample_from(residual, u_residual)), accepted


def recursive_rejection(first: torch.Tensor, siblings: torch.Tensor, q: torch.Tensor, p: torch.Tensor,
                        u_accept: torch.Tensor, u_residual: torch.Tensor, live: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Recursive rejection sampling (Jeon et al. 2024) after the first candidate failed, where `live` [B].

    first [B] was drawn from q [B, V] and rejected against p [B, V]; siblings [B, S] continue the draw
    without replacement from q. Candidate i is tested against the residual r_i left by the ones before
    it, under its own law q_i (q with the tokens tried zeroed, renormalised): accepted with probability
    min(1, r_i / q_i), else r_{i+1} = norm(max(0, r_i - q_i)). With every candidate rejected the output
    is drawn from the last residual. Each stage outputs r_i's law, so the whole outputs p.
    -> (y [B], chosen [B]: 1 + the accepted sibling, 0 where none was or the row was not live).
    """
    qi, r = q, (p - q).clamp(min=0)
    chosen = torch.zeros_like(first)
    tried = first
    for i in range(siblings.shape[1]):
        qi = _normalised(qi.scatter(-1, tried[:, None], 0.0))
        r = _normalised(r, fallback=p)
        c = siblings[:, i]
        qc, rc = qi.gather(-1, c[:, None]).squeeze(-1), r.gather(-1, c[:, None]).squeeze(-1)
        test = live & (chosen == 0) & (qc > 0)  # a sibling q cannot have drawn (q's mass ran out) is no candidate
        chosen = torch.where(test & (u_accept[:, i] * qc < rc), i + 1, chosen)
        r = torch.where((test & (chosen == 0))[:, None], (r - qi).clamp(min=0), r)
        tried = c
    y = torch.where(chosen > 0, siblings.gather(1, (chosen - 1).clamp(min=0)[:, None]).squeeze(1),
                    sample_from(_normalised(r, fallback=p), u_residual))
    return y, chosen


def _normalised(w: torch.Tensor, fallback: torch.Tensor | None = None) -> torch.Tensor:
    """w [B, V] / its sum; rows with no mass stay zero, or become `fallback` (p == q: nothing to reject)."""
    total = w.sum(-1, keepdim=True)
    if fallback is not None:
        return torch.where(total > 0, w / total.clamp(min=1e-30), fallback)
    return w / total.clamp(min=1e-30)


def take_branch(y: torch.Tensor, accepted: torch.Tensor, chosen: torch.Tensor, y_branch: torch.Tensor,
                accepted_branch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where chosen [B] > 0, slot 0 passed with a sibling and its branch's children decide slots 1..D:
    y_branch [B, D] outputs at slots 1..D, accepted_branch [B, D-1] children at slots 1..D-1. The branch's
    outputs replace the chain's only at the slots it commits, and its first failed child (or the slot past
    the branch) ends the accepted run; elsewhere y and accepted [B, L-1] stay the chain's."""
    D = y_branch.shape[1]
    on = chosen[:, None] > 0
    lead = accepted_branch.long().cumprod(1).sum(1)  # children accepted on the branch
    slots = torch.arange(1, D + 1, device=y.device)
    y = y.clone()
    y[:, 1:D + 1] = torch.where(on & (slots <= lead[:, None] + 1), y_branch, y[:, 1:D + 1])
    accepted = accepted.clone()
    accepted[:, 0] |= chosen > 0
    stop = torch.cat([accepted_branch, accepted_branch.new_zeros(accepted.shape[0], 1)], 1)  # slots 1..D
    accepted[:, 1:D + 1] = torch.where(on, stop[:, : accepted.shape[1] - 1], accepted[:, 1:D + 1])
    return y, accepted


def branch_logp(logp: torch.Tensor, chosen: torch.Tensor, length: int, depth: int) -> torch.Tensor:
    """logp [B, W, V] of a tree forward -> [B, D, V] at the nodes of the chosen branch (p of slots 1..D)."""
    node = length + (chosen - 1).clamp(min=0)[:, None] * depth + torch.arange(depth, device=logp.device)
    return logp.gather(1, node[..., None].expand(-1, -1, logp.shape[2]))


class RejectionVerifier:
    """Lossless for any drafter that stores the true law q of its drafts. The bonus slot is drawn by
    Gumbel-max on the noise row of its position, so with no drafts this is plain AR sampling."""

    reads_q = True
    reads = frozenset({CHAIN})
    same_tokens = False  # (its uniforms come from a counter: how many a row draws depends on its windows)

    def __call__(self, state: DecodeState, draft: Draft, logp: torch.Tensor, L: int) -> Verdict:
        return self.chain(state, draft, logp[:, :L], state.index(L))

    def chain(self, state: DecodeState, draft: Draft, logp: torch.Tensor, index: torch.Tensor) -> Verdict:
        L = index.shape[1]
        bonus = state.gumbel_max(logp[:, L - 1:], index[:, L - 1:])  # [B, 1]
        if L == 1:  # plain AR: nothing to test
            return Verdict(bonus, draft.tokens.new_zeros(bonus.shape[0], 0, dtype=torch.bool), index)
        u = state.streams.uniform(2, L - 1).to(logp.device)  # [B, 2, L-1]
        y, accepted = rejection_sample(draft.tokens, draft.q, logp[:, :-1].exp(), u[:, 0], u[:, 1], draft.onehot)
        return Verdict(torch.cat([y, bonus], 1), accepted, index)

    def siblings(self, state, draft, logp0, verdict, siblings):
        """Siblings were drawn without replacement from slot 0's q after d_0: recursive rejection sampling. A one-hot
        d_0 has no q to draw siblings from: its verdict stands."""
        S = siblings.shape[1]
        u = state.streams.uniform(S + 1).to(logp0.device)  # [B, S + 1]
        live = ~verdict.accepted[:, 0] & ~draft.onehot[:, 0]
        y0, chosen = recursive_rejection(draft.tokens[:, 0], siblings, draft.q[:, 0], logp0.exp(), u[:, :S], u[:, S],
                                         live)
        return torch.where(live, y0, verdict.y[:, 0]), chosen


class GumbelMatchVerifier:
    """Seed-exact: each slot's output is argmax(log p + g) with the same noise plain AR sampling uses;
    a draft is accepted when it equals that output, so the result is AR's, token for token."""

    reads_q = False
    reads = frozenset({CHAIN})
    same_tokens = True

    def __call__(self, state: DecodeState, draft: Draft, logp: torch.Tensor, L: int) -> Verdict:
        return self.chain(state, draft, logp[:, :L], state.index(L))

    def chain(self, state: DecodeState, draft: Draft, logp: torch.Tensor, index: torch.Tensor) -> Verdict:
        y = state.gumbel_max(logp, index)  # [B, L]
        return Verdict(y, y[:, :-1] == draft.tokens, index, gumbel_max=y)

    def siblings(self, state, draft, logp0, verdict, siblings):
        """Slot 0's output is AR's whichever candidate equals it: the first sibling that does is chosen."""
        match = siblings == verdict.y[:, :1]  # [B, S]
        chosen = torch.where(verdict.accepted[:, 0] | ~match.any(1), 0, match.long().argmax(1) + 1)
        return verdict.y[:, 0], chosen


class BranchVerifier:
    """A chain verifier with proactive branches at slot 0 (a `TreeDraft`); chain drafts pass straight through.

    When d_0 fails, the chain verifier's sibling test picks a sibling (or none); the chosen branch's children
    are then a chain of their own at indices n+1..n+D, tested by the same chain verifier under the branch's p
    (its nodes' logp, which the same forward computed) and its own laws. `exact` stays exact: slot 0's output
    is AR's whichever candidate matched, and the branch's slots take argmax(log p + g) under the branch's p,
    which is AR's p once the sibling is committed."""

    reads = frozenset({CHAIN, BRANCHES})

    def __init__(self, chain: ChainVerifier):
        self.chain, self.same_tokens = chain, chain.same_tokens

    def __call__(self, state: DecodeState, draft: DraftRecord, logp: torch.Tensor, L: int) -> Verdict:
        if draft.tree is None:  # no branches this step: the chain alone
            return self.chain(state, draft, logp, L)
        chain = draft.chain
        verdict = self.chain(state, chain, logp, L)
        y0, chosen = self.chain.siblings(state, chain, logp[:, 0], verdict, draft.branches[:, :, 0])
        D = draft.branches.shape[2]
        pick = (chosen - 1).clamp(min=0)  # [B] the chosen branch (branch 0 where none was: masked by take_branch)
        children = draft.branches.gather(1, pick[:, None, None].expand(-1, 1, D))[:, 0, 1:]  # [B, D-1]
        if draft.branch_q is None:  # children drawn from the chain's q of their slot (its token where one-hot)
            q, onehot = None if chain.q is None else chain.q[:, 1:D], chain.onehot[:, 1:D]
        else:  # the chosen branch's own laws
            V = draft.branch_q.shape[-1]
            q = draft.branch_q.gather(1, pick[:, None, None, None].expand(-1, 1, D - 1, V))[:, 0]
            onehot = torch.zeros_like(children, dtype=torch.bool)
        sub = self.chain.chain(state, Draft(children, q, onehot), branch_logp(logp, chosen, L, D),
                               verdict.index[:, 1:D + 1])
        y = verdict.y.clone()
        y[:, 0] = y0
        y, accepted = take_branch(y, verdict.accepted, chosen, sub.y, sub.accepted)
        return Verdict(y, accepted, verdict.index, gumbel_max=None if verdict.gumbel_max is None else y,
                       branch=chosen, path=draft.tree.path(chosen))


class TreeVerifier:
    """A chain verifier with token trees (`TokenTree`, mmspec.drafters.tree); other drafts pass straight through.

    From the root (the last committed token), at each node of the path: y = AR's draw at that node,
    argmax(log p + g) on the noise row of the index it is for; the child whose token is y becomes the next node of
    the path (an accepted draft), and where no child is y, y is the correction and the step ends. Every committed
    token is AR's draw given the committed tokens before it, and a draw not committed is made again from the same
    noise in a later step, so whatever the tree holds (and whatever it was chosen from: AR's noise included) the
    tokens are `ar`'s with the same seed; the tree only decides how many of them one forward reaches.

    Why AR's noise and not a fresh draw from p: children are chosen, so a fresh draw passes a node with the p-mass
    of its children, which for a high-entropy p is below the 1 - TV(p, q) of rejection sampling one drawn draft
    (code-text: 0.5-0.6 at slot 0 against 0.74); on AR's noise the drafter ranks by the same noise and regains
    the coupling (0.86-0.89 with 32-64 nodes; benchmarks/README.md)."""

    reads = frozenset({CHAIN, TOKEN_TREE})

    def __init__(self, chain: ChainVerifier):
        self.chain, self.same_tokens = chain, chain.same_tokens

    def __call__(self, state: DecodeState, draft: DraftRecord, logp: torch.Tensor,
                 L: int) -> Verdict:
        if draft.chain is not None:  # a chain (a lookup's, the first window's): verified as one
            return self.chain(state, draft, logp, L)
        y_all = state.gumbel_max(logp, state.n[:, None] + draft.tree.offset)  # [B, W]: AR's draw at every node
        node = draft.tokens.new_zeros(draft.tokens.shape[0])  # [B] the path's node at the current depth
        ys, accepted, path = [], [], []
        for _ in range(L - 1):
            y, node, found = self.descend(state, draft, logp, y_all, node)
            ys.append(y)
            accepted.append(found)
            path.append(node)  # (after the path ended: never committed)
        ys.append(y_all.gather(1, node[:, None])[:, 0])  # the bonus, where the path reached the deepest slot
        return Verdict(torch.stack(ys, 1), torch.stack(accepted, 1), state.index(L), path=torch.stack(path, 1))

    def descend(self, state: DecodeState, draft: TokenTree, logp: torch.Tensor, y_all: torch.Tensor,
                node: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One slot of the path from node [B]: (its output y [B], the child of node that is y, or node itself where
        none is [B], found [B])."""
        y = y_all.gather(1, node[:, None])  # [B, 1]
        child = (draft.parent == node[:, None]) & (draft.tokens == y)  # [B, N] (siblings differ, but at a forced index)
        found = child.any(1)
        return y[:, 0], torch.where(found, child.long().argmax(1) + 1, node), found

"""Verifiers: turn the target's p over a window and the drafts into one output token per slot.

Slot j < L-1 holds a draft d_j with its law q_j; slot L-1 has no draft (bonus). The loop commits
slots up to and including the first rejected one; later slots feed the drafter (coupled drafting).
With proactive branches (mmspec.tree), slot 0 has alternatives: when d_0 fails, its siblings are
tried in turn, and the first one accepted continues along its own branch of children, whose p the
same forward computed; the verdict then carries that path's tokens at the slots it committed and
the chain's everywhere else (what the drafter carries on was drawn under the chain's p).
"""
from __future__ import annotations

from typing import Protocol

import torch

from mmspec.sampling import sample_from
from mmspec.state import DecodeState
from mmspec.steps import Draft, Verdict


class Verifier(Protocol):
    def __call__(self, state: DecodeState, draft: Draft, logp: torch.Tensor) -> Verdict:
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

    def __call__(self, state: DecodeState, draft: Draft, logp: torch.Tensor) -> Verdict:
        L = state.window
        index = state.index()  # [B, L]
        bonus = state.gumbel_max(logp[:, L - 1:L], index[:, -1:])  # [B, 1]
        if L == 1 and draft.branches is None:  # plain AR: nothing to test
            return Verdict(bonus, draft.tokens.new_zeros(bonus.shape[0], 0, dtype=torch.bool), index)
        p = logp[:, :L].exp()  # [B, L, V]
        u = state.streams.uniform(2, L - 1).to(p.device)  # [B, 2, L-1]
        y, accepted = rejection_sample(draft.tokens, draft.q, p[:, :-1], u[:, 0], u[:, 1], draft.onehot)
        y = torch.cat([y, bonus], 1)
        if draft.branches is None:
            return Verdict(y, accepted, index)
        S, D = draft.branches.shape[1:]
        u = state.streams.uniform(S + 2 * D).to(p.device)  # [B, S + 2D]
        live = ~accepted[:, 0] & ~draft.onehot[:, 0]  # siblings need slot 0's q: none for a one-hot draft
        y0, chosen = recursive_rejection(draft.tokens[:, 0], draft.branches[:, :, 0], draft.q[:, 0], p[:, 0],
                                         u[:, :S], u[:, S], live)
        y[:, 0] = torch.where(live, y0, y[:, 0])
        p_branch = branch_logp(logp, chosen, L, D).exp()  # [B, D, V]: p of slots 1..D on the branch
        children = draft.branches.gather(1, (chosen - 1).clamp(min=0)[:, None, None].expand(-1, 1, D))[:, 0, 1:]
        u = u[:, S + 1:]
        q, onehot = draft.q[:, 1:D], draft.onehot[:, 1:D]
        if draft.branch_q is not None:  # the chosen branch's own laws
            V = draft.branch_q.shape[-1]
            q = draft.branch_q.gather(1, (chosen - 1).clamp(min=0)[:, None, None, None].expand(-1, 1, D - 1, V))[:, 0]
            onehot = torch.zeros_like(onehot)
        yc, ac = rejection_sample(children, q, p_branch[:, :-1], u[:, : D - 1], u[:, D - 1: 2 * D - 2], onehot)
        y_branch = torch.cat([yc, sample_from(p_branch[:, -1], u[:, -1])[:, None]], 1)
        y, accepted = take_branch(y, accepted, chosen, y_branch, ac)
        return Verdict(y, accepted, index, branch=chosen)


class GumbelMatchVerifier:
    """Seed-exact: each slot's output is argmax(log p + g) with the same noise plain AR sampling uses;
    a draft is accepted when it equals that output, so the result is AR's, token for token. Proactive
    branches keep that: slot 0's output is the same whichever sibling matches it, and a branch's slots
    take argmax(log p + g) under the branch's own p, which is AR's p once the sibling is committed."""

    def __call__(self, state: DecodeState, draft: Draft, logp: torch.Tensor) -> Verdict:
        L = state.window
        index = state.index()  # [B, L]
        y = state.gumbel_max(logp[:, :L], index)  # [B, L]
        accepted = y[:, :-1] == draft.tokens
        if draft.branches is None:
            return Verdict(y, accepted, index, gumbel_max=y)
        D = draft.branches.shape[2]
        match = draft.branches[:, :, 0] == y[:, :1]  # [B, S]
        chosen = torch.where(accepted[:, 0] | ~match.any(1), 0, match.long().argmax(1) + 1)
        y_branch = state.gumbel_max(branch_logp(logp, chosen, L, D), index[:, 1:D + 1])  # [B, D]
        children = draft.branches.gather(1, (chosen - 1).clamp(min=0)[:, None, None].expand(-1, 1, D))[:, 0, 1:]
        y, accepted = take_branch(y, accepted, chosen, y_branch, children == y_branch[:, :-1])
        return Verdict(y, accepted, index, gumbel_max=y, branch=chosen)

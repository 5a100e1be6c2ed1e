"""Verifiers: turn the target's p over a window and the drafts into one output token per slot.

Slot j < L-1 holds a draft d_j with its law q_j; slot L-1 has no draft (bonus). The loop commits
slots up to and including the first rejected one; later slots feed the drafter (coupled drafting).
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


class RejectionVerifier:
    """Lossless for any drafter that stores the true law q of its drafts. The bonus slot is drawn by
    Gumbel-max on the noise row of its position, so with no drafts this is plain AR sampling."""

    def __call__(self, state: DecodeState, draft: Draft, logp: torch.Tensor) -> Verdict:
        index = state.index()  # [B, L]
        p = logp.exp()  # [B, L, V]
        u = state.streams.uniform(2, state.window - 1).to(p.device)  # [B, 2, L-1]
        y, accepted = rejection_sample(draft.tokens, draft.q, p[:, :-1], u[:, 0], u[:, 1], draft.onehot)
        bonus = (logp[:, -1] + state.streams.gumbel(index[:, -1:])[:, 0]).argmax(-1)
        return Verdict(torch.cat([y, bonus[:, None]], 1), accepted, index)


class GumbelMatchVerifier:
    """Seed-exact: each slot's output is argmax(log p + g) with the same noise plain AR sampling uses;
    a draft is accepted when it equals that output, so the result is AR's, token for token."""

    def __call__(self, state: DecodeState, draft: Draft, logp: torch.Tensor) -> Verdict:
        index = state.index()  # [B, L]
        y = (logp + state.streams.gumbel(index)).argmax(-1)  # [B, L]
        return Verdict(y, y[:, :-1] == draft.tokens, index, gumbel_max=y)

"""Verifiers: turn the target's p over a window and the drafts into one output token per slot.

Slot j < L-1 holds a draft d_j with its law q_j; slot L-1 has no draft (bonus). The loop commits
slots up to and including the first rejected one; later slots feed the drafter (coupled drafting).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from mmspec.drafters.base import Draft
from mmspec.sampling import sample_from
from mmspec.state import DecodeState


@dataclass
class Verdict:
    y: torch.Tensor  # [B, L] output at every slot: accepted draft, correction, or bonus
    accepted: torch.Tensor  # [B, L-1] bool: draft j passed its own test


class Verifier(Protocol):
    def __call__(self, state: DecodeState, draft: Draft, logp: torch.Tensor) -> Verdict:
        ...


def rejection_sample(d: torch.Tensor, q: torch.Tensor, p: torch.Tensor, u_accept: torch.Tensor,
                     u_residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Modified rejection sampling, per slot: d [..], q, p [.., V] fp32, uniforms [..] -> (y, accepted).

    Accept d with probability min(1, p(d)/q(d)); otherwise draw from norm(max(0, p - q)), computed
    exactly (no epsilon): if d ~ q then y ~ p, and P(y = d) = 1 - TV(p, q), the maximal coupling.
    """
    pd = p.gather(-1, d[..., None]).squeeze(-1)
    qd = q.gather(-1, d[..., None]).squeeze(-1)
    accepted = u_accept * qd < pd
    residual = (p - q).clamp(min=0)
    empty = residual.sum(-1, keepdim=True) == 0  # p == q: no rejection is possible, keep p for safety
    residual = torch.where(empty, p, residual)
    return torch.where(accepted, d, sample_from(residual, u_residual)), accepted


class RejectionVerifier:
    """Lossless for any drafter that stores the true law q of its drafts. The bonus slot is drawn by
    Gumbel-max on the position-ordered noise stream, so with no drafts this is plain AR sampling."""

    def __call__(self, state: DecodeState, draft: Draft, logp: torch.Tensor) -> Verdict:
        p = logp.exp()  # [B, L, V]
        u = state.streams.uniform(2, state.window - 1).to(p.device)  # [B, 2, L-1]
        y, accepted = rejection_sample(draft.tokens, draft.q, p[:, :-1], u[:, 0], u[:, 1])
        bonus = (logp[:, -1] + state.window_gumbel()[:, -1]).argmax(-1)
        return Verdict(torch.cat([y, bonus[:, None]], 1), accepted)


class GumbelMatchVerifier:
    """Seed-exact: each slot's output is argmax(log p + g) with the same noise plain AR sampling uses;
    a draft is accepted when it equals that output, so the result is AR's, token for token."""

    def __call__(self, state: DecodeState, draft: Draft, logp: torch.Tensor) -> Verdict:
        y = (logp + state.window_gumbel()).argmax(-1)  # [B, L]
        return Verdict(y, y[:, :-1] == draft.tokens)

"""Self-drafting: Jacobi windows (SJD, SCD) and lookup drafts.

After a verification the window moves on by the k committed tokens. Slots past the committed ones
are *carried*: a redraw rule gives them new tokens under the new p, and since each new token is
distributed as p_j given everything before slot j, the stored q is p_j, also when the old token
was kept (storing the old q is the bug of two of the three public SCD back-ends). The k-1 slots
that enter at the end of the window are fresh and filled by a fill policy (q one-hot).
"""
from __future__ import annotations

from typing import Protocol

import torch

from mmspec.drafters.base import Draft
from mmspec.drafters.fill import Fill
from mmspec.sampling import sample_from
from mmspec.state import DecodeState, one_hot


class Redraw(Protocol):
    def __call__(self, state: DecodeState, draft: Draft, verdict, logp: torch.Tensor):
        """-> tokens [B, L] for every window slot under the new p, and their laws q [B, L, V]."""


class IndependentRedraw:
    """SJD: an independent draw from p_j (the aux stream)."""

    def __call__(self, state, draft, verdict, logp):
        p = logp.exp()
        return sample_from(p, state.streams.uniform(state.window).to(p.device)), p


class CoupledRedraw:
    """SCD maximal coupling: the verifier's rejection-sampling output at every slot, i.e. the old
    draft kept with probability min(1, p/q), else a residual draw."""

    def __call__(self, state, draft, verdict, logp):
        return verdict.y, logp.exp()


class GumbelRedraw:
    """SCD-GS: argmax(log p_j + g_j) with the noise row of slot j's position, fixed for its life."""

    def __call__(self, state, draft, verdict, logp):
        return (logp + state.window_gumbel()).argmax(-1), logp.exp()


def _window_tokens(state: DecodeState) -> torch.Tensor:
    return state.seq.gather(1, state.index(state.window - 1))  # [B, L-1]


class JacobiDrafter:
    def __init__(self, redraw: Redraw, fill: Fill):
        self.redraw, self.fill = redraw, fill
        self.q: torch.Tensor | None = None  # [B, L-1, V]

    def start(self, state):
        self.fill(state, state.n)
        self.q = one_hot(_window_tokens(state), state.vocab_size)

    def propose(self, state):
        return Draft(_window_tokens(state), self.q)

    def update(self, state, draft, verdict, logp, k):
        z, qz = self.redraw(state, draft, verdict, logp)  # [B, L], [B, L, V]
        L, V = state.window, state.vocab_size
        src = torch.arange(L - 1, device=k.device) + k[:, None]  # new slot i <- old slot i + k
        carried = src < L
        src = src.clamp(max=L - 1)
        index = state.index(L - 1)
        state.seq.scatter_(1, index, torch.where(carried, z.gather(1, src), state.seq.gather(1, index)))
        self.fill(state, state.n + L - k)
        q = qz.gather(1, src[..., None].expand(-1, -1, V))
        self.q = torch.where(carried[..., None], q, one_hot(_window_tokens(state), V))


class LookupDrafter:
    """Every step, draft all L-1 slots with a fill policy (n-gram, row above, previous frame)."""

    def __init__(self, fill: Fill):
        self.fill = fill

    def start(self, state):
        pass

    def propose(self, state):
        self.fill(state, state.n)
        tokens = _window_tokens(state)
        return Draft(tokens, one_hot(tokens, state.vocab_size))

    def update(self, state, draft, verdict, logp, k):
        pass

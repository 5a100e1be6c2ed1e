"""Self-drafting with Jacobi windows (SJD, SCD).

After a verification the window moves on by the k committed tokens. Slots past the committed ones
are *carried*: a redraw rule gives them new tokens under the new p, and since each new token is
distributed as p_j given everything before slot j, the stored q is p_j, also when the old token
was kept (storing the old q is the bug of two of the three public SCD back-ends). Slots that enter
at the end of the window (k-1 of them, or more when the next window is wider) are fresh and filled
by a fill policy (q one-hot); when the next window is narrower the last slots are dropped.
"""
from __future__ import annotations

from typing import Protocol

import torch

from mmspec.drafters.fill import Fill
from mmspec.sampling import sample_from
from mmspec.state import DecodeState
from mmspec.steps import CHAIN, Draft, Verdict


class Redraw(Protocol):
    def __call__(self, state: DecodeState, draft: Draft, verdict: Verdict, logp: torch.Tensor) -> torch.Tensor:
        """-> tokens [B, L] for every window slot of the verified step, drawn from its new p (logp [B, L, V])."""


class IndependentRedraw:
    """SJD: an independent draw from p_j (the aux stream)."""

    def __call__(self, state, draft, verdict, logp):
        return sample_from(logp.exp(), state.streams.uniform(logp.shape[1]).to(logp.device))


class CoupledRedraw:
    """SCD maximal coupling: the verifier's rejection-sampling output at every slot, i.e. the old
    draft kept with probability min(1, p/q), else a residual draw."""

    def __call__(self, state, draft, verdict, logp):
        return verdict.y


class GumbelRedraw:
    """SCD-GS: argmax(log p_j + g_j) with the noise row of slot j's position, fixed for its life (the
    verifier's own draws when it made them: same p, same positions, so the same tokens)."""

    def __call__(self, state, draft, verdict, logp):
        if verdict.gumbel_max is not None:
            return verdict.gumbel_max
        return state.gumbel_max(logp, verdict.index)


class JacobiDrafter:
    """`laws`: keep q, the law of each carried slot, for a verifier that tests drafts by it or branches drawn from it;
    without them (`exact`'s argmax match) every draft goes out with q None, and a step saves the exp of its p, which on
    a CPU costs 20x more where top-k left -inf (exp's slow path: 0.16 ms of an emoji-image step at 16)."""

    makes = frozenset({CHAIN})
    admits = True

    def __init__(self, redraw: Redraw, fill: Fill, laws: bool = True):
        self.redraw, self.fill, self.laws = redraw, fill, laws
        self.q: torch.Tensor | None = None  # [B, D, V] law of the carried slots (None: none carried yet, or no laws)
        self.onehot: torch.Tensor | None = None  # [B, D] slots whose q is one-hot (fresh)

    def start(self, state, context):
        self.fill.start(state, context)
        self.q, self.onehot = None, state.seq.new_ones(state.batch_size, 0, dtype=torch.bool)

    def admit(self, state, rows, context):
        """New rows carry nothing: their slots of the window are fresh (q one-hot), filled now."""
        self.fill.admit(state, rows, context)
        have = self.onehot.shape[1]
        if have:
            first = state.n + have  # [B] (nothing to fill in the other rows)
            first[rows] = state.n[rows]
            with state.streams.only(rows):  # (as their first window's fill alone: a run of their own draws as much)
                self.fill(state, first, have + 1)
            self.onehot[rows] = True

    def propose(self, state, window):
        L, D, have = window.L, window.D, self.onehot.shape[1]
        if D == 0:  # plain AR (`auto` at a batch runs it most steps): nothing to draft, as `NoDraft`
            return Draft.copied(state.seq.new_zeros(state.batch_size, 0))
        if D > have:  # a wider window than the last: fill the new slots
            self.fill(state, state.n + have, L)
            self.onehot = torch.cat([self.onehot, self.onehot.new_ones(state.batch_size, D - have)], 1)
            if self.q is not None:
                self.q = torch.cat([self.q, self.q.new_zeros(state.batch_size, D - have, self.q.shape[2])], 1)
        self.onehot, self.q = self.onehot[:, :D], None if self.q is None else self.q[:, :D]
        return Draft(state.draft_tokens(L), self.q, self.onehot)

    def update(self, state, draft, verdict, logp, k):
        L, V = logp.shape[1], logp.shape[2]
        if L == 1:  # a window of one carries no slot: the next window's are all fresh
            self.q, self.onehot = None, self.onehot[:, :0]
            return
        z = self.redraw(state, draft, verdict, logp)  # [B, L]
        src = torch.arange(L - 1, device=k.device) + k[:, None]  # new slot i <- old slot i + k
        carried = src < L
        src = src.clamp(max=L - 1)
        index = state.index(L - 1)
        state.seq.scatter_(1, index, torch.where(carried, z.gather(1, src), state.seq.gather(1, index)))
        self.fill(state, state.n + L - k, L)
        if self.laws:
            self.q = logp.gather(1, src[..., None].expand(-1, -1, V)).exp()  # [B, L-1, V]: each carried slot's new p
        self.onehot = ~carried

"""What limits acceptance, measured without touching the engine: a verifier that wraps a method's own.

SCD's diagnosis: a draft carried from one Jacobi iteration to the next stores q = its p from the previous
iteration, and the verifier accepts it with probability 1 - TV(q, p_new) under maximal coupling (at most
that under any coupling). So per window slot we record, over carried drafts (q not one-hot), the TV between
the stored q and the new p at the same index, how often those drafts passed their own test, and the entropy
of p where tokens were committed (there the context is final, so p is plain AR's). The wrapper only reads:
it draws no random numbers and returns the wrapped verifier's verdict, so the tokens are the method's own.
"""
from __future__ import annotations

import dataclasses

import torch

from mmspec.methods import Method
from mmspec.state import DecodeState
from mmspec.steps import Draft, Verdict
from mmspec.verify import Verifier


def tv_distance(q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """[..., V] two laws -> [...] total variation distance, 1/2 sum |q - p|."""
    return 0.5 * (q - p).abs().sum(-1)


def entropy(p: torch.Tensor) -> torch.Tensor:
    """[..., V] -> [...] entropy in nats (0 log 0 = 0: top-k / top-p leave zeros)."""
    return torch.special.entr(p).sum(-1)


class MeasuringVerifier:
    """Wraps a verifier; sums per window slot what the summary reports. One instance may see several
    generations (the 1-row runs of a case): the sums pool them."""

    def __init__(self, verifier: Verifier):
        self.verifier = verifier
        self.sums: dict[str, torch.Tensor] = {}  # name -> [max window] float64, per slot
        self.rows = 0  # rows over all generations seen
        self.free_forwards = 0  # (row, forward) pairs that committed at least one free (not forced) token
        self.single = 0  # ... that committed exactly one free token

    def __call__(self, state: DecodeState, draft: Draft, logp: torch.Tensor) -> Verdict:
        verdict = self.verifier(state, draft, logp)
        with torch.no_grad():
            self._record(state, draft, logp, verdict)
        return verdict

    def _add(self, name: str, per_slot: torch.Tensor) -> None:
        """per_slot [B, W] -> summed over rows into slots 0..W-1 of `name`."""
        add = per_slot.sum(0).double().cpu()
        total = self.sums.get(name, add.new_zeros(0))
        if len(total) < len(add):  # a wider window than any before
            total = torch.cat([total, add.new_zeros(len(add) - len(total))])
        total[: len(add)] += add
        self.sums[name] = total

    def _record(self, state: DecodeState, draft: Draft, logp: torch.Tensor, verdict: Verdict) -> None:
        if state.step == 0:
            self.rows += state.batch_size
        L, W = logp.shape[1], logp.shape[1] - 1
        index = verdict.index  # [B, L]
        # positions the model chooses in this window: inside the layout, row still running, not forced
        free = (index < state.length) & state.active[:, None] & (state.structural(index) < 0)  # [B, L]
        p = logp.exp()  # [B, L, V] fp32
        drafted = free[:, :W]  # [B, W]
        carried = drafted & ~draft.onehot
        self._add("drafted", drafted)
        self._add("passed", drafted & verdict.accepted)
        self._add("carried", carried)
        self._add("carried_passed", carried & verdict.accepted)
        if draft.q is not None and W:
            tv = tv_distance(draft.q, p[:, :W]).masked_fill(~carried, 0.0)  # [B, W]
            self._add("tv", tv)
            self._add("gumbel_bound", ((1 - tv) / (1 + tv)).masked_fill(~carried, 0.0))
        # committed: slots up to the first rejection (its correction or the bonus included), as the loop does
        lead = verdict.accepted.long().cumprod(1).sum(1)  # [B]
        committed = free & (torch.arange(L, device=index.device) <= lead[:, None])  # [B, L]
        self._add("committed", committed)
        self._add("entropy", entropy(p).masked_fill(~committed, 0.0))
        per_row = committed.sum(1)  # [B] free tokens this forward committed
        self.free_forwards += int((per_row > 0).sum())
        self.single += int((per_row == 1).sum())

    def summary(self) -> dict:
        """Per slot (lists; None where nothing was measured) and overall:
        tv: mean TV(q, p_new) over carried drafts; expected: 1 - tv, the acceptance maximal coupling gives them;
        gumbel_bound: mean (1-TV)/(1+TV), the least Gumbel coupling gives (the `exact` test); carried_pass:
        how often carried drafts passed their own test; carried_share: carried / free drafts; draft_pass: how
        often any free draft passed its own test (fresh one-hot drafts included); entropy: mean entropy of p
        (nats) at committed free positions. free_forwards_per_row: forwards that committed a free token, per row
        (what a prefilled given frame would not cost); single_share: of those, the share that committed one;
        counts: per slot, the carried and free drafts and the committed free tokens the means are over."""
        s = self.sums
        out = {"rows": self.rows, "free_forwards_per_row": self.free_forwards / max(self.rows, 1),
               "single_share": self.single / max(self.free_forwards, 1),
               "free_tokens_per_row": float(s["committed"].sum()) / max(self.rows, 1) if s else 0.0}
        ratios = {"tv": ("tv", "carried"), "gumbel_bound": ("gumbel_bound", "carried"),
                  "carried_pass": ("carried_passed", "carried"), "carried_share": ("carried", "drafted"),
                  "draft_pass": ("passed", "drafted"), "entropy": ("entropy", "committed")}
        for name, (num, den) in ratios.items():
            if num not in s:  # no draft kept a q (lookup, ar): no TV to report
                continue
            out[name] = _per_slot(s[num], s[den])
            out[f"mean_{name}"] = float(s[num].sum() / s[den].sum()) if s[den].sum() else None
        if "tv" in out:
            out["expected"] = [None if t is None else 1 - t for t in out["tv"]]
        out["counts"] = {name: s[name].tolist() for name in ("carried", "drafted", "committed") if name in s}
        return out


def _per_slot(num: torch.Tensor, den: torch.Tensor) -> list:
    return [float(n / d) if d else None for n, d in zip(num.tolist(), den.tolist())]


def measured(method: Method) -> Method:
    """The same method with its verifier wrapped in a fresh MeasuringVerifier (method.verifier)."""
    return dataclasses.replace(method, verifier=MeasuringVerifier(method.verifier))

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
from mmspec.steps import Draft, TreeDraft, Verdict
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
        self.free: list[torch.Tensor] = []  # per generation seen: [B, N] where the model chooses (not given)

    @property
    def reads(self) -> frozenset[str]:
        return self.verifier.reads  # (it verifies what the verifier it wraps does)

    @property
    def same_tokens(self) -> bool:
        return self.verifier.same_tokens

    def __call__(self, state: DecodeState, draft: "Draft | TreeDraft", logp: torch.Tensor, L: int) -> Verdict:
        verdict = self.verifier(state, draft, logp, L)
        with torch.no_grad():
            self._record(state, draft.chain if isinstance(draft, TreeDraft) else draft, logp, verdict)
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
            self.free.append((state.forced[:, : state.length] < 0).cpu())
        L = verdict.index.shape[1]  # the chain (logp goes on past it with proactive branches' nodes)
        W = L - 1
        index = verdict.index  # [B, L]
        # positions the model chooses in this window: inside the layout, row still running, not forced
        free = (index < state.length) & state.active[:, None] & (state.structural(index) < 0)  # [B, L]
        p = logp[:, :L].exp()  # [B, L, V] fp32
        drafted = free[:, :W]  # [B, W]
        carried = drafted & ~draft.onehot
        self._add("drafted", drafted)
        self._add("passed", drafted & verdict.accepted)
        self._add("carried", carried)
        self._add("carried_passed", carried & verdict.accepted)
        if draft.q is not None and W:
            tv = tv_distance(draft.q, p[:, :W]).masked_fill(~carried, 0.0)  # [B, W]
            self._add("tv", tv)
        # committed: slots up to the first rejection (its correction or the bonus included), as the loop does; a
        # stop token (text) the wrapper does not see, so the slots after one in its window count too
        lead = verdict.accepted.long().cumprod(1).sum(1)  # [B]
        committed = free & (torch.arange(L, device=index.device) <= lead[:, None])  # [B, L]
        self._add("committed", committed)
        self._add("entropy", entropy(p).masked_fill(~committed, 0.0))

    def summary(self) -> dict:
        """Per slot (lists; None where nothing was measured) and overall:
        tv: mean TV(q, p_new) over carried drafts; expected: 1 - tv, the acceptance maximal coupling gives them
        (`exact`'s Gumbel match gives at least (1-TV)/(1+TV), at most 1 - TV); carried_pass:
        how often carried drafts passed their own test; carried_share: carried / free drafts; draft_pass: how
        often any free draft passed its own test (fresh one-hot drafts included); entropy: mean entropy of p
        (nats) at committed free positions; counts: per slot, the carried and free drafts and the committed free
        tokens the means are over."""
        s, out = self.sums, {}
        ratios = {"tv": ("tv", "carried"), "carried_pass": ("carried_passed", "carried"),
                  "carried_share": ("carried", "drafted"), "draft_pass": ("passed", "drafted"),
                  "entropy": ("entropy", "committed")}
        for name, (num, den) in ratios.items():
            if num not in s:  # tv when no draft kept a q (lookup, ar)
                continue
            out[name] = _per_slot(s[num], s[den])
            out[f"mean_{name}"] = float(s[num].sum() / s[den].sum()) if s[den].sum() else None
        if "tv" in out:
            out["expected"] = [None if t is None else 1 - t for t in out["tv"]]
        out["counts"] = {name: s[name].tolist() for name in ("carried", "drafted", "committed") if name in s}
        return out


def _per_slot(num: torch.Tensor, den: torch.Tensor) -> list:
    return [float(n / d) if d else None for n, d in zip(num.tolist(), den.tolist())]


def generated(commit_step: torch.Tensor, free: torch.Tensor) -> dict:
    """Stats.commit_step [B, N] (the forward that committed each token, -1 if none) and free [B, N] (the model
    chose the token: not given, not structural) -> per row [B]: "forwards" that committed at least one chosen
    token (a given frame prefilled in one pass would cost none of the others), "tokens" chosen, and "single":
    forwards that committed exactly one."""
    chosen = free & (commit_step >= 0)  # [B, N]
    per_step = torch.zeros(len(chosen), int(commit_step.max()) + 2, dtype=torch.long)  # [B, forwards + 1]
    per_step.scatter_add_(1, (commit_step + 1).clamp(min=0).cpu(), chosen.long().cpu())  # column 0: never
    per_step = per_step[:, 1:]
    return {"forwards": (per_step > 0).sum(1), "tokens": chosen.sum(1).cpu(), "single": (per_step == 1).sum(1)}


def measured(method: Method) -> Method:
    """The same method with its verifier wrapped in a fresh MeasuringVerifier (method.verifier)."""
    return dataclasses.replace(method, verifier=MeasuringVerifier(method.verifier))

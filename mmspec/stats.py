"""Speculation statistics, per row and aggregated.

NFE counts target forwards while a row was generating. Mean acceptance length is committed tokens
per forward (vLLM's definition: it includes the corrected / bonus token). Acceptance rate is
accepted drafts / drafts verified. Structural tokens are committed but never count as drafts.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from mmspec.state import DecodeState


@dataclass
class Stats:
    nfe: torch.Tensor  # [B] target forwards per row
    committed: torch.Tensor  # [B] tokens committed
    drafted: torch.Tensor  # [B] draft tokens verified (non-structural, inside the layout)
    accepted: torch.Tensor  # [B] drafts accepted into the committed prefix
    accepted_at: torch.Tensor  # [B, L-1] how often the draft at window slot j was accepted
    forwards_at: torch.Tensor  # [B, L-1] forwards whose window had a slot j (all of them at a fixed window)
    commit_step: torch.Tensor  # [B, N] forward (0-based) that committed each token; -1 if never
    seconds: float = 0.0
    window: int = 1  # the widest window allowed (L)

    @classmethod
    def empty(cls, batch: int, length: int, window: int, device) -> "Stats":
        z = lambda *s: torch.zeros(*s, dtype=torch.long, device=device)  # noqa: E731
        return cls(z(batch), z(batch), z(batch), z(batch), z(batch, max(window - 1, 0)), z(batch, max(window - 1, 0)),
                   torch.full((batch, length), -1, dtype=torch.long, device=device), window=window)

    @classmethod
    def cat(cls, parts: "list[Stats]") -> "Stats":
        """The stats of a request run in batches, rows in order (seconds add up)."""
        def rows(name):
            return torch.cat([getattr(p, name) for p in parts])
        names = ("nfe", "committed", "drafted", "accepted", "accepted_at", "forwards_at", "commit_step")
        return cls(*map(rows, names), seconds=sum(p.seconds for p in parts), window=parts[0].window)

    def rows(self, rows: torch.Tensor, commit_step: torch.Tensor, seconds: float) -> "Stats":
        """The stats of rows `rows` [b] alone (mmspec.engine: a request's, when its rows finish), with their tokens'
        forwards `commit_step` [b, N] and the request's `seconds`."""
        def part(t):
            return t[rows].clone()
        return Stats(part(self.nfe), part(self.committed), part(self.drafted), part(self.accepted),
                     part(self.accepted_at), part(self.forwards_at), commit_step, seconds=seconds, window=self.window)

    def reset(self, rows: torch.Tensor) -> None:
        """Rows `rows` [b] start counting anew (a new request's rows in their places), in place."""
        for t in (*self.written(), self.committed):
            t[rows] = 0

    def written(self) -> tuple[torch.Tensor, ...]:
        """The counts a step adds to in place."""
        return self.nfe, self.drafted, self.accepted, self.accepted_at, self.forwards_at

    def record(self, state: "DecodeState", index: torch.Tensor, lead: torch.Tensor, k: torch.Tensor, L: int,
               unpadded: "torch.Tensor | None" = None) -> None:
        """One forward over a window of L (index [B, L] of its positions), where each row accepted `lead` [B] drafts
        before its first rejection and committed k [B] tokens (before the state moves on). `unpadded` [] (a padded
        chain): the L of the drafts the step was given, slots past it not drafted."""
        self.nfe += state.active
        if L == 1:  # a window of one has no drafts to count
            return
        # a draft counts where it is inside the layout, not structural, and among the drafts given (a padded chain);
        # an accepted one is committed too (k counts no more than the layout, the drafts given and the active rows)
        slots = torch.arange(L - 1, device=index.device)
        drafted = (index[:, :-1] < state.length) & state.active[:, None]  # [B, L-1]
        if state.any_forced:
            drafted &= state.structural(index[:, :-1]) < 0
        if unpadded is not None:
            drafted &= slots < unpadded - 1
        accepted = drafted & (slots < torch.minimum(lead, k)[:, None])
        self.drafted += drafted.sum(1)
        self.accepted += accepted.sum(1)
        D = min(L, self.window) - 1  # slots past the policy's widest (a widened step's) hold forced tokens only
        self.accepted_at[:, :D] += accepted[:, :D]
        self.forwards_at[:, :D] += state.active[:, None] if unpadded is None else \
            state.active[:, None] & (slots[:D] < unpadded - 1)

    @property
    def mean_acceptance_length(self) -> float:
        return self.committed.sum().item() / max(self.nfe.sum().item(), 1)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted.sum().item() / max(self.drafted.sum().item(), 1)

    @property
    def acceptance_per_position(self) -> list[float]:
        """Fraction of forwards with a window slot j in which its draft was accepted (vLLM's per-position rate)."""
        return (self.accepted_at.sum(0).float() / self.forwards_at.sum(0).clamp(min=1)).tolist()

    @property
    def total_nfe(self) -> int:
        """Forwards of the batch (rows share them)."""
        return int(self.nfe.max().item()) if self.nfe.numel() else 0

    @property
    def mean_window(self) -> float:
        """Positions verified per forward, over all forwards (a forward at window L has L - 1 draft slots)."""
        return 1 + self.forwards_at.sum().item() / max(self.nfe.sum().item(), 1)

    def summary(self, policy: "str | None" = None, seconds: "float | None" = None) -> dict:
        """The figures a run reports. window: the fixed window, or with a policy that picks it at every step
        (`policy`, e.g. "auto") its name and the mean window that ran ("auto, mean 8.0"), not its cap.
        seconds: the caller's wall-clock (a pipeline's includes encoding and decoding), else the decode loop's."""
        seconds = self.seconds if seconds is None else seconds
        tokens = int(self.committed.sum())
        window = self.window if policy is None or self.window == 1 else f"{policy}, mean {self.mean_window:.1f}"
        return {"rows": len(self.nfe), "window": window, "nfe": self.total_nfe,
                "nfe_per_row": round(self.nfe.float().mean().item(), 2) if self.nfe.numel() else 0.0,
                "tokens": tokens, "mean_acceptance_length": round(self.mean_acceptance_length, 3),
                "acceptance_rate": round(self.acceptance_rate, 3), "seconds": round(seconds, 3),
                "tokens_per_second": round(tokens / max(seconds, 1e-9), 1)}

    def __str__(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.summary().items())

"""Speculation statistics, per row and aggregated.

NFE counts target forwards while a row was generating. Mean acceptance length is committed tokens
per forward (vLLM's definition: it includes the corrected / bonus token). Acceptance rate is
accepted drafts / drafts verified. Structural tokens are committed but never count as drafts.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


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

    def written(self) -> tuple[torch.Tensor, ...]:
        """The counts a step adds to in place."""
        return self.nfe, self.drafted, self.accepted, self.accepted_at, self.forwards_at

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

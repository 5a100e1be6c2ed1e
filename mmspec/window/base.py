"""Window policies: how many positions the next forward verifies (L), decided afresh at every step.

Verification is lossless step by step, so any sequence of windows keeps the output law (and keeps
`exact` equal to `ar`: noise belongs to positions, not to windows or steps).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from mmspec.adapters.base import Session
    from mmspec.state import DecodeState

MAX_WINDOW = 256


class WindowPolicy(Protocol):
    max_window: int  # no step asks for more: caches and buffers are sized by it
    # read before each step: keep a batch's rows in step (mmspec.verify_step.in_step_counts), where that pays (a
    # batch on a CPU)
    in_step: bool

    def start(self, session: "Session", state: "DecodeState") -> None:
        """Once, after prefill and before the first step (a policy may read the session's device or shapes)."""

    def __call__(self, state: "DecodeState") -> int:
        """L for the next step, 1 <= L <= max_window (1: plain AR, no drafts)."""
        ...

    def observe(self, state: "DecodeState", k: torch.Tensor, seconds: float) -> None:
        """After each step: k [B] tokens committed per row, and the step's seconds (hooks excluded)."""


class FixedWindow:
    in_step = False

    def __init__(self, window: int):
        self.max_window = window

    def start(self, session, state) -> None:
        pass

    def __call__(self, state: "DecodeState") -> int:
        return self.max_window

    def observe(self, state, k, seconds) -> None:
        pass


class AcceptanceWindow:
    """Grow the window while acceptance runs long, shrink it when they are short: L is the power of two nearest
    (in ratio) to `headroom` times the recent committed tokens per step (an average over steps, decayed), within
    [min_window, max_window].

    Unlike AutoWindow it measures no time, so the windows, and with them the tokens of any method, depend only on
    the seeds: a run repeats exactly. It suits devices where a forward's cost barely grows with its L (a GPU
    at small batch), where the widest useful window is the one to run: video's long accepted runs take it to 128,
    an image's short ones keep it near 16.
    """

    in_step = False

    def __init__(self, max_window: int = 128, min_window: int = 4, headroom: float = 8.0, decay: float = 0.8):
        if not 1 <= min_window <= max_window <= MAX_WINDOW:
            raise ValueError(f"need 1 <= min_window <= max_window <= {MAX_WINDOW}, got {min_window}, {max_window}")
        self.max_window, self.min_window, self.headroom, self.decay = max_window, min_window, headroom, decay
        self.mean_k = None  # committed tokens per step of a running row (decayed average)

    def start(self, session, state) -> None:
        pass

    def __call__(self, state: "DecodeState") -> int:
        if self.mean_k is None:
            return self.max_window  # nothing measured yet: Jacobi drafts need room to show what they can do
        want = 1 << max(0, round(math.log2(max(self.headroom * self.mean_k, 1.0))))
        return min(self.max_window, max(self.min_window, want))

    def observe(self, state, k, seconds) -> None:
        running = k[k > 0]
        if running.numel():
            step_k = float(running.float().mean())
            self.mean_k = step_k if self.mean_k is None else self.decay * self.mean_k + (1 - self.decay) * step_k


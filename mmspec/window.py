"""Window policies: how many positions the next forward verifies, decided afresh at every step.

Verification is lossless step by step, so any sequence of windows keeps the output law (and keeps
`exact` equal to `ar`: noise belongs to positions, not to windows or steps).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from mmspec.state import DecodeState

MAX_WINDOW = 256


class WindowPolicy(Protocol):
    max_window: int  # no step asks for more: caches and buffers are sized by it

    def __call__(self, state: "DecodeState") -> int:
        """L for the next step, 1 <= L <= max_window (1: plain AR, no drafts)."""
        ...

    def observe(self, state: "DecodeState", k: torch.Tensor, seconds: float) -> None:
        """After each step: k [B] tokens committed per row, and the step's seconds (hooks excluded)."""


class FixedWindow:
    def __init__(self, window: int):
        self.max_window = window

    def __call__(self, state: "DecodeState") -> int:
        return self.max_window

    def observe(self, state, k, seconds) -> None:
        pass


class AutoWindow:
    """Pick L to maximise committed tokens per second, measured on the running generation.

    A window's worth is its throughput: tokens committed by the active rows per second of step time
    (drafting, the forward over L positions at this batch size on this device, verification). Jacobi
    drafts only pay off after a few iterations at the same width, so each candidate (1, 4, 16, 64, ...
    up to max_window) is measured over a stretch of consecutive steps. Starting from L = 1 (plain AR),
    the next wider candidate is measured only while widening has paid so far, so a batch too large
    for wide windows to pay never spends a stretch on them. Then the best one runs, with a stretch of
    a neighbouring width every `recheck` steps (acceptance changes along a generation); a neighbour
    that loses again waits twice as long for its next stretch. A wider window must beat a narrower
    one by `margin` to be kept: throughput varies along a generation (a frame boundary, a flat
    region), and a wide window kept on a lucky stretch costs most.

    With a `WindowMemory` (a pipeline keeps one for its model and device), the measurements carry over
    from one generation to the next of the same batch size: a render job's later batches, or the
    demo's next click, start at the best known window instead of exploring from plain AR again.
    """

    stretch = 4  # steps per measurement of a candidate
    recheck = 24  # steps at the best window between stretches of a neighbour
    margin = 1.15  # a wider window is preferred only when its throughput is this much higher

    def __init__(self, max_window: int = 32, memory: "WindowMemory | None" = None):
        if not 1 <= max_window <= MAX_WINDOW:
            raise ValueError(f"max_window must be in [1, {MAX_WINDOW}], got {max_window}")
        self.max_window, self.memory = max_window, memory
        self.candidates = sorted({1 << (2 * i) for i in range(5) if 1 << (2 * i) <= max_window} | {max_window})
        self.tokens = {L: 0.0 for L in self.candidates}  # committed tokens measured at each width (decayed)
        self.seconds = {L: 0.0 for L in self.candidates}
        self.measured = {L: -1 for L in self.candidates}  # the step at which each width last ran
        self.wait = {L: self.recheck for L in self.candidates}  # steps before a losing width runs again
        self.explored, self.plan, self.window, self.step = 0, [], 1, 0
        self.attached = memory is None

    def rate(self, L: int) -> float:
        return self.tokens[L] / self.seconds[L] if self.seconds[L] > 0 else 0.0

    def __call__(self, state: "DecodeState") -> int:
        if not self.attached:
            self._recall(state)
        if not self.plan:
            self.plan = self._next_plan()
        self.window = self.plan.pop(0)
        return self.window

    def _next_plan(self) -> list[int]:
        c, i = self.candidates, self.explored
        if i < len(c) and (i < 2 or self.rate(c[i - 1]) > self.rate(c[i - 2])):  # widening has paid so far
            self.explored += 1
            return [c[i]] * self.stretch
        self.explored = len(c)
        best = c[0]
        for L in c[1:]:  # a wider window must win clearly: its measurements are noisier and its mistakes dearer
            if self.measured[L] >= 0 and self.rate(L) > self.margin * self.rate(best):
                best = L
        b = c.index(best)
        due = [L for L in c[max(b - 1, 0): b + 2] if L != best and self.step - self.measured[L] >= self.wait[L]]
        self.wait[best] = self.recheck
        if not due:
            return [best] * self.recheck
        again = min(due, key=self.measured.get)
        self.wait[again] *= 2
        return [best] * self.recheck + [again] * self.stretch

    def _recall(self, state: "DecodeState") -> None:
        """Share the memory's measurements and recheck waits for this batch shape; widths measured before count
        as explored, and a width that kept losing stays rarely rechecked (a render job's later batches)."""
        self.tokens, self.seconds, self.wait = self.memory.measurements(state, self.candidates, self.recheck)
        for L in self.candidates:
            if self.seconds[L] > 0:
                self.measured[L] = 0
        if self.seconds[self.candidates[0]] > 0:
            self.explored = len(self.candidates)
        self.attached = True

    def observe(self, state, k, seconds) -> None:
        L = self.window
        self.step += 1
        self.measured[L] = self.step
        if self.step == 1:
            return  # the first step of a generation pays one-off costs (allocations, caches): not L's
        # recent stretches weigh more: acceptance drifts along a generation
        self.tokens[L] = 0.9 * self.tokens[L] + float(k.sum())
        self.seconds[L] = 0.9 * self.seconds[L] + seconds


class AcceptanceWindow:
    """Grow the window while acceptance runs long, shrink it when they are short: L is the power of two nearest
    (in ratio) to `headroom` times the recent committed tokens per step (an average over steps, decayed), within
    [min_window, max_window].

    Unlike AutoWindow it measures no time, so the windows, and with them the tokens of any method, depend only on
    the seeds: a run repeats exactly. It suits devices where a forward's cost barely grows with its width (a GPU
    at small batch), where the widest useful window is the one to run: video's long accepted runs take it to 128,
    an image's short ones keep it near 16.
    """

    def __init__(self, max_window: int = 128, min_window: int = 4, headroom: float = 8.0, decay: float = 0.8):
        if not 1 <= min_window <= max_window <= MAX_WINDOW:
            raise ValueError(f"need 1 <= min_window <= max_window <= {MAX_WINDOW}, got {min_window}, {max_window}")
        self.max_window, self.min_window, self.headroom, self.decay = max_window, min_window, headroom, decay
        self.mean_k = None  # committed tokens per step of a running row (decayed average)

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


class WindowMemory:
    """AutoWindow's measurements kept across generations: decayed committed tokens and step seconds per
    window, and the steps a losing window waits before its next recheck, for each batch shape (rows, CFG or
    not). One per pipeline, i.e. per model and device."""

    def __init__(self):
        self.shapes: dict[tuple, tuple[dict, dict, dict]] = {}

    def measurements(self, state: "DecodeState", windows: list[int], recheck: int) -> tuple[dict, dict, dict]:
        """(tokens, seconds, wait) by window for the state's batch shape: shared dicts the policy updates."""
        tokens, seconds, wait = self.shapes.setdefault((state.batch_size, state.sampling.cfg), ({}, {}, {}))
        for L in windows:
            tokens.setdefault(L, 0.0)
            seconds.setdefault(L, 0.0)
            wait.setdefault(L, recheck)
        return tokens, seconds, wait


def window_policy(window: "int | str | WindowPolicy") -> WindowPolicy:
    """An int (the same window at every step), "auto" (AutoWindow) or a policy object."""
    if window == "auto":
        return AutoWindow()
    if isinstance(window, bool) or not isinstance(window, int) and not callable(window):
        raise ValueError(f"window must be an int in [1, {MAX_WINDOW}], 'auto' or a window policy, got {window!r}")
    policy = FixedWindow(window) if isinstance(window, int) else window
    top = getattr(policy, "max_window", None)
    if not isinstance(top, int) or not 1 <= top <= MAX_WINDOW:
        raise ValueError(f"window must be in [1, {MAX_WINDOW}], got {top!r}")
    if not callable(getattr(policy, "observe", None)):
        raise ValueError("a window policy needs max_window, __call__(state) and observe(state, k, seconds)")
    return policy

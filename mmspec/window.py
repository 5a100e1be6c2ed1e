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


# seconds per step, by (model key, device, rows, L): measured once per process, reused by later calls
STEP_SECONDS: dict[tuple, float] = {}


class AutoWindow:
    """Pick L at every step to maximise expected committed tokens per second.

    tokens(L) = rows x (1 + sum_{j < L-1} a_j), where a_j is the observed rate at which the draft in
    window slot j was accepted together with all before it (extrapolated geometrically past the widest
    window tried); seconds(L) is the measured time of a step of width L at this batch size, on this
    device, kept per `key` (the model) for the rest of the process. Each candidate width is tried
    once before the policy starts to choose (and a wider one now and then while it keeps L = 1, since
    acceptance can rise later in a generation), so a window that does not pay for itself is not kept:
    L = 1 (plain AR) is always a candidate.
    """

    explore_every = 16  # while at L = 1, try the best wider window once every this many steps

    def __init__(self, max_window: int = 32, key: object = None):
        if not 1 <= max_window <= MAX_WINDOW:
            raise ValueError(f"max_window must be in [1, {MAX_WINDOW}], got {max_window}")
        self.max_window, self.key = max_window, key
        self.candidates = sorted({1 << i for i in range(9) if 1 << i <= max_window} | {max_window})
        self.tried = torch.zeros(max_window)  # [L-1] steps x rows in which slot j existed
        self.kept = torch.zeros(max_window)  # [L-1] ... and its draft was accepted with all before it
        self.local: dict[int, float] = {}  # L -> seconds per step (EMA), when no key is given
        self.window, self.steps = 1, 0

    def _cost_key(self, state: "DecodeState", L: int):
        return (self.key, state.seq.device.type, state.batch_size, L)

    def _seconds(self, state, L: int) -> float | None:
        return STEP_SECONDS.get(self._cost_key(state, L)) if self.key is not None else self.local.get(L)

    def __call__(self, state: "DecodeState") -> int:
        untried = [L for L in self.candidates
                   if self._seconds(state, L) is None or (L > 1 and self.tried[L - 2] == 0)]
        if untried:
            self.window = untried[0]
            return self.window
        a = self._acceptance()
        ranked = sorted(self.candidates, key=lambda L: -(1 + float(a[: L - 1].sum())) / self._seconds(state, L))
        self.steps += 1
        explore = ranked[0] == 1 and len(ranked) > 1 and self.steps % self.explore_every == 0
        self.window = ranked[1] if explore else ranked[0]
        return self.window

    def _acceptance(self) -> torch.Tensor:
        """a_j for every slot: observed where tried, geometric decay past the widest tried slot."""
        seen = self.tried > 0
        a = torch.where(seen, self.kept / self.tried.clamp(min=1), torch.zeros_like(self.tried))
        last = int(seen.nonzero().max()) if seen.any() else -1
        if last >= 0 and last + 1 < len(a):
            ratio = float(a[last] / a[last - 1]) if last >= 1 and a[last - 1] > 0 else float(a[last])
            ratio = min(max(ratio, 0.0), 1.0)
            a[last + 1:] = a[last] * ratio ** torch.arange(1, len(a) - last, dtype=a.dtype)
        return a

    def observe(self, state, k, seconds) -> None:
        L = self.window
        rows = state.active | (k > 0)  # rows that took part in this step
        lead = (k - 1).clamp(min=0)[rows].float()  # drafts accepted in a row before the first rejection
        slots = torch.arange(L - 1, dtype=torch.float32, device=lead.device)
        self.tried[: L - 1] += float(rows.sum())
        self.kept[: L - 1] += (lead[:, None] > slots).sum(0).float().cpu()
        if self.key is not None:
            key = self._cost_key(state, L)
            old = STEP_SECONDS.get(key)
            STEP_SECONDS[key] = seconds if old is None else 0.8 * old + 0.2 * seconds
        else:
            old = self.local.get(L)
            self.local[L] = seconds if old is None else 0.8 * old + 0.2 * seconds


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

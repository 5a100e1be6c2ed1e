"""Window policies: how many positions the next forward verifies, decided afresh at every step.

Verification is lossless step by step, so any sequence of windows keeps the output law (and keeps
`exact` equal to `ar`: noise belongs to positions, not to windows or steps).
"""
from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
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

    A window's worth is its throughput: tokens per step over seconds per step, where the tokens are those of
    the row furthest behind: a batch is done when its slowest row is (rows that finished first ride along),
    so at 8 rows a window that lets some rows race ahead gains nothing. The two are measured apart:
    - Seconds per step (drafting, the forward over L positions at this batch size on this device,
      verification) are measured at each width that runs; they change little along a generation.
    - Tokens per step are bursty (mostly 1, now and then a long accepted run), so they are averaged over many
      steps, each width over its own steps only. (Counting a step at width W that commits k as min(k, L) for
      a narrower L is biased toward L: the first L slots of a wide window carry more Jacobi iterations than a
      window of L ever gives them. On emoji-image at 1 row it made width 4 look 18% better than it runs, and
      tie with 16, which is 1.5x faster.) The steps right after a change of width do not count either: after a
      widening to L, max(`warmup`, L/4) steps, whose new slots start from fresh fills that a window kept at L
      would not have; after a narrowing, `warmup` steps, whose slots were refined by the wider window.
    Starting from L = 1 (plain AR), each wider candidate (1, 4, 16, 64, ... up to max_window) runs a
    stretch while it could plausibly win: its step cost, extrapolated linearly in L from the two widths
    measured last, times the best throughput must not ask for more than `growth` times the tokens per
    step of the last width. So a batch too large for wide windows to pay never spends a stretch on them.
    Then the best one runs, with a stretch of a neighbouring width every `recheck` steps (acceptance
    changes along a generation; a wider neighbour only while it is still plausible by the same test); a
    neighbour that loses again waits twice as long for its next stretch, up to `max_wait` steps. A wider window
    must beat a narrower one by `margin` to be kept (a wide window kept on a lucky stretch costs most), and any
    window must beat the one running by `margin` to replace it.

    With a `WindowMemory` (a pipeline keeps one for its model and device, on disk), the measurements carry
    over from one generation to the next of the same batch size: a render job's later batches, the demo's
    next click or the next CLI call start at the best known window instead of exploring from plain AR.
    """

    stretch = 4  # measured steps per stretch of a candidate
    warmup = 2  # at least this many steps after a change of width have their tokens not counted (see _warmup)
    recheck = 24  # steps at the best window between stretches of a neighbour
    max_wait = 8 * recheck  # the longest a losing neighbour waits for its next stretch
    margin = 1.05  # a wider window is preferred only when its throughput is this much higher
    growth = 2.5  # the most a 4x wider window is assumed to raise the tokens per step
    decay = 0.9  # weight of the earlier step costs at each new one
    memory_of_tokens = 0.98  # the same for tokens: they are bursty, and only a long average shows what a width gives

    def __init__(self, max_window: int = 32, memory: "WindowMemory | None" = None):
        if not 1 <= max_window <= MAX_WINDOW:
            raise ValueError(f"max_window must be in [1, {MAX_WINDOW}], got {max_window}")
        self.max_window, self.memory = max_window, memory
        self.candidates = sorted({1 << (2 * i) for i in range(5) if 1 << (2 * i) <= max_window} | {max_window})
        # decayed sums per width: tokens and the steps they were counted over; seconds and the steps they took
        self.tokens, self.counted, self.seconds, self.steps = ({L: 0.0 for L in self.candidates} for _ in range(4))
        self.measured = {L: -1 for L in self.candidates}  # the step at which each width last ran
        self.wait = {L: self.recheck for L in self.candidates}  # steps before a losing width runs again
        self.explored, self.plan, self.window, self.step, self.unmeasured = 0, [], 1, 0, 0
        self.best = None  # the width chosen last (None while exploring)
        self.attached = memory is None

    def per_step(self, L: int) -> tuple[float, float]:
        """(tokens, seconds) per step at width L as measured so far (0 where nothing was measured)."""
        tokens = self.tokens[L] / self.counted[L] if self.counted[L] > 0 else 0.0
        return tokens, self.seconds[L] / self.steps[L] if self.steps[L] > 0 else 0.0

    def rate(self, L: int) -> float:
        tokens, seconds = self.per_step(L)
        return tokens / seconds if seconds > 0 else 0.0

    def __call__(self, state: "DecodeState") -> int:
        if not self.attached:
            self._recall(state)
        if not self.plan:
            self.plan = self._next_plan()
        L = self.plan.pop(0)
        if L != self.window:
            self.unmeasured = self._warmup(L, self.window)
        self.window = L
        return L

    def _next_plan(self) -> list[int]:
        c, i = self.candidates, self.explored
        if i < len(c) and (i < 2 or self._plausible(c[i], c[i - 2], c[i - 1])):
            self.explored += 1
            return [c[i]] * (self.stretch + self._warmup(c[i], self.window))
        self.explored = len(c)
        best = c[0]
        for L in c[1:]:  # a wider window must win clearly: its measurements are noisier and its mistakes dearer
            if self.steps[L] > 0 and self.rate(L) > self.margin * self.rate(best):
                best = L
        # and any width must win clearly against the one running: a neighbour's stretch is a few bursty steps, and
        # a switch on their luck costs more than the margin (at 1 row on emoji-image, 16 fell back to 4 that way)
        if self.best is not None and self.rate(best) <= self.margin * self.rate(self.best):
            best = self.best
        self.best = best
        b = c.index(best)
        # a wider neighbour is rechecked only while it could still pay, by the costs measured now: at 8 rows a
        # stretch of 64 (and its warm-up of 16 steps) costs more than a generation's worth of what it could win
        due = [L for L in c[max(b - 1, 0): b + 2] if L != best and self.step - self.measured[L] >= self.wait[L]
               and (L < best or b == 0 or self._plausible(L, c[b - 1], best))]
        self.wait[best] = self.recheck
        if not due:
            return [best] * self.recheck
        again = min(due, key=self.measured.get)
        self.wait[again] = min(2 * self.wait[again], self.max_wait)
        return [best] * self.recheck + [again] * (self.stretch + self._warmup(again, best))

    def _warmup(self, L: int, before: int) -> int:
        """Steps after a change of width from `before` to L whose tokens do not count. Widening: until the slots
        it opened, fresh fills, have moved to the front of the window with Jacobi iterations behind them.
        Narrowing: until the slots the wider window refined have been committed or replaced."""
        if L == before:
            return 0
        return max(self.warmup, L // 4) if L > before else self.warmup

    def _plausible(self, L: int, a: int, b: int) -> bool:
        """Whether width L, wider than the widths a < b measured last, could beat the best so far."""
        (_, cost_a), (tokens_b, cost_b) = self.per_step(a), self.per_step(b)
        if cost_a == 0 or cost_b == 0:
            return False
        cost = cost_b + (L - b) * max(cost_b - cost_a, 0.0) / (b - a)
        return max(map(self.rate, self.candidates)) * cost <= self.growth * tokens_b

    def _recall(self, state: "DecodeState") -> None:
        """Share the memory's measurements and recheck waits for this batch shape; widths measured before count
        as explored, and a width that kept losing stays rarely rechecked (a render job's later batches)."""
        self.tokens, self.counted, self.seconds, self.steps, self.wait = self.memory.measurements(
            state, self.candidates, self.recheck)
        for L in self.candidates:
            if self.steps[L] > 0:
                self.measured[L] = 0
        if self.steps[self.candidates[0]] > 0:
            self.explored = len(self.candidates)
        self.attached = True

    def observe(self, state, k, seconds) -> None:
        W = self.window
        self.step += 1
        self.measured[W] = self.step
        if self.step == 1:
            return  # the first step of a generation pays one-off costs (allocations, caches): not W's
        self.seconds[W] = self.decay * self.seconds[W] + seconds
        self.steps[W] = self.decay * self.steps[W] + 1
        if self.unmeasured > 0:
            self.unmeasured -= 1
            return
        ran = k > 0
        if not ran.any():
            return
        before = (state.n - k).masked_fill(~ran, state.length)  # [B] committed lengths before this step
        lag = int(k[before == before.min()].min())  # what the row furthest behind committed: the batch ends with it
        self.tokens[W] = self.memory_of_tokens * self.tokens[W] + lag
        self.counted[W] = self.memory_of_tokens * self.counted[W] + 1


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
    """AutoWindow's measurements kept across generations: decayed tokens, step seconds and their step counts per
    window, and the steps a losing window waits before its next recheck, for each batch shape (rows, CFG or
    not). One per pipeline and method, i.e. per model, device and method.

    With a `path`, the measurements are read from that JSON file when the memory is made, and `save()` writes
    them back, so that the next process on the same machine (the next CLI call, a job's next run) starts from
    the best known window instead of exploring from plain AR. A file that cannot be read is set aside with a
    warning: it only holds timings, and measuring again gives them back.
    """

    fields = ("tokens", "counted", "seconds", "steps", "wait")

    def __init__(self, path: "str | Path | None" = None):
        self.path = Path(path) if path is not None else None
        self.shapes: dict[tuple, tuple[dict, ...]] = {}
        if self.path is not None and self.path.is_file():
            try:
                saved = json.loads(self.path.read_text())
                self.shapes = {(int(rows), bool(cfg)): tuple({int(L): float(v) for L, v in shape[f].items()}
                                                             for f in self.fields)
                               for rows, cfg, shape in saved["shapes"]}
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                warnings.warn(f"ignoring the window measurements in {self.path} ({err!r}); measuring afresh")

    def measurements(self, state: "DecodeState", windows: list[int], recheck: int) -> tuple[dict, ...]:
        """(tokens, counted, seconds, steps, wait) by window for the state's batch shape: shared dicts the policy
        updates (AutoWindow's)."""
        shape = self.shapes.setdefault((state.batch_size, bool(state.sampling.cfg)), tuple({} for _ in self.fields))
        for values, empty in zip(shape, (0.0, 0.0, 0.0, 0.0, recheck)):
            for L in windows:
                values.setdefault(L, empty)
        return shape

    def save(self) -> None:
        """Write the measurements to `path` (atomically: a concurrent reader sees the old file or the new one)."""
        if self.path is None or not self.shapes:  # nothing measured (e.g. a method with a fixed window)
            return
        shapes = [[rows, cfg, dict(zip(self.fields, values))] for (rows, cfg), values in self.shapes.items()]
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"shapes": shapes}))
            os.replace(tmp, self.path)
        except OSError as err:  # a read-only home must not fail a generation that is done
            warnings.warn(f"could not keep the window measurements in {self.path} ({err}); set MMSPEC_WINDOW_CACHE "
                          "to a writable folder, or to off")


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

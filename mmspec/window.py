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

import numpy as np
import torch

if TYPE_CHECKING:
    from mmspec.adapters.base import Session
    from mmspec.state import DecodeState

MAX_WINDOW = 256


class WindowPolicy(Protocol):
    max_window: int  # no step asks for more: caches and buffers are sized by it
    # optional `in_step: bool`, read before each step: keep a batch's rows in step (mmspec.loop.in_step_counts)

    def start(self, session: "Session", state: "DecodeState") -> None:
        """Once, after prefill and before the first step (a policy may read the session's device or shapes)."""

    def __call__(self, state: "DecodeState") -> int:
        """L for the next step, 1 <= L <= max_window (1: plain AR, no drafts)."""
        ...

    def observe(self, state: "DecodeState", k: torch.Tensor, seconds: float) -> None:
        """After each step: k [B] tokens committed per row, and the step's seconds (hooks excluded)."""


class FixedWindow:
    def __init__(self, window: int):
        self.max_window = window

    def start(self, session, state) -> None:
        pass

    def __call__(self, state: "DecodeState") -> int:
        return self.max_window

    def observe(self, state, k, seconds) -> None:
        pass


class AutoWindow:
    """Pick L to maximise committed tokens per second, measured on the running generation.

    A window's worth is its throughput: tokens per step over seconds per step, where the tokens are how far the
    step moved the batch's rearmost row (`batch_progress`): a batch is done when its slowest row is, so at 8 rows
    a window that lets some rows race ahead gains nothing. The two are measured apart:
    - Seconds per step (drafting, the forward over L positions at this batch size on this device,
      verification) are measured at each width that runs; they change little along a generation.
    - Tokens per step are bursty (mostly 1, now and then a long accepted run), so they are averaged over many
      steps, each width over its own steps only. (Counting a step at width W that commits k as min(k, L) for
      a narrower L is biased toward L: the first L slots of a wide window carry more Jacobi iterations than a
      window of L ever gives them. On emoji-image at 1 row it made width 4 look 18% better than it runs, and
      tie with 16, which is 1.5x faster.) The steps right after a change of width do not count either: after a
      widening to L, max(`warmup`, L/4) steps, whose new slots start from fresh fills that a window kept at L
      would not have; after a narrowing, `warmup` steps, whose slots were refined by the wider window.
    Starting from L = 1 (plain AR), each wider candidate (1, 4, 8, 16, 32, ... up to max_window) runs a
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

    When the memory holds an acceptance prior for the method (tokens per step by width and batch size, measured
    offline on the model: `load_prior`), the first generation need not explore either: what is left to learn is
    the step cost at each width on this device at this batch size, and a couple of real steps tell it (`probe`;
    they commit tokens like any other). Widths are probed narrowest first, and only while they could win at the
    least their step can cost: at 16 rows on emoji-image only 4 is, for two steps. (Timing dry
    forwards at start instead cost 3-5% of a 16-row generation, 8x what the probes waste, and missed the
    drafting and verification a step adds to its forward.) The memory keeps the costs for the next call.
    With a prior, the widths are not judged by their own steps but by the prior's shape, scaled by this
    generation: a width's extra tokens per step (over AR's one) are the prior's times one scale, measured by
    every step at any width (`scale`). The prompt and the region of the output set how much is accepted, and
    they move every width's extra tokens together (on emoji-image, fixed windows of 4 and 16 gain 1.7x and 2.0x
    the prior's extra tokens on "red heart", 0.65x and 0.57x on "dog face"); what each width ran on does not
    bias the choice: a stretch of 4 in an easy region of the image no longer beats a 16 measured in a hard one.
    The neighbour rechecks then measure a width's step cost, and only while it could plausibly win (`hope`).
    Where the prior is given by band of the output (equal shares of its indices; the figure of the band the row
    furthest behind is in), the region is the prior's business and the scale the prompt's: on emoji-image the top
    rows commit 1.4 tokens per step at 16 (plain AR wins at one row on a CPU) and the rest 1.8-2.3 (16 wins), so AR
    runs through the top rows and 16 from the next band on, and the hard rows no longer pull the scale down for the
    rest of the image. At a new band the plan is made afresh if the best width changes with it; at one row a width
    that wins by the prior where the output now is runs at once, not after a stretch of the width running.
    """

    stretch = 4  # measured steps per stretch of a candidate
    warmup = 2  # at least this many steps after a change of width have their tokens not counted (see _warmup)
    # steps at the best window between stretches of a neighbour. (24 before: a stretch costs wide steps at a batch,
    # and at one row AR's stretches in the hard top rows of an emoji kept rechecking widths that lose there;
    # benchmarks/policy_sim.py, emoji-image at 1 row on this CPU's costs: 1.103x -> 1.166x of `ar`, 8 rows 0.970x ->
    # 0.985x, video the same)
    recheck = 48
    max_wait = 4 * recheck  # the longest a losing neighbour waits for its next stretch
    margin = 1.05  # a wider window is preferred only when its throughput is this much higher (at one row)
    batch_margin = 1.15  # the same at a batch (see _recall)
    growth = 2.5  # the most a 4x wider window is assumed to raise the tokens per step
    kept = 9  # a width's step cost is the least of its last `kept` timed steps (see observe)
    fresh = recheck  # a width is picked only if it ran this many steps ago at most (or runs now)
    slack = 0.85  # the share of a step's extrapolated extra cost a wider width is sure to pay (see _could_win)
    bend = 0.25  # at one row, the least a step's cost per extra position falls from one width to the next
    memory_of_tokens = 0.98  # decay of the token sums per counted step: tokens are bursty, only a long average tells
    prior_steps = 8  # the weight of the prior (scale 1) in `scale`, in measured steps
    probe = 3  # with a prior, steps that measure a width's cost (after its first, which is not timed)
    hope = 1.25  # with a prior, a neighbour that ran is rechecked only while its estimate is this close to the best
    one_row = 2  # with a prior at one row, stretches are this many times longer (see _recall)

    def __init__(self, max_window: int = 32, memory: "WindowMemory | None" = None, widths: "list[int] | None" = None):
        if not 1 <= max_window <= MAX_WINDOW:
            raise ValueError(f"max_window must be in [1, {MAX_WINDOW}], got {max_window}")
        self.max_window, self.memory = max_window, memory
        # by default plain AR, 4, then every doubling: the best width is often between powers of 4 (emoji-video at 8
        # rows: 8 runs 1.26x AR, 16 1.17x, 4 1.12x)
        widths = widths or [1] + [4 << i for i in range(7)]
        if 1 not in widths or not all(isinstance(W, int) and W >= 1 for W in widths):
            raise ValueError(f"widths must be positive ints including 1 (plain AR), got {widths!r}")
        self.candidates = sorted({W for W in widths if W <= max_window} | {max_window})
        # per width: decayed sums of tokens, of the steps they were counted over and of the extra tokens the prior
        # expected of those steps (at their region of the output); the seconds of its last timed steps
        self.tokens, self.counted, self.prior_extra = ({L: 0.0 for L in self.candidates} for _ in range(3))
        self.seconds: dict[int, list[float]] = {L: [] for L in self.candidates}
        self.measured = {L: -1 for L in self.candidates}  # the step at which each width last ran
        self.wait = {L: self.recheck for L in self.candidates}  # steps before a losing width runs again
        self.explored, self.plan, self.window, self.step, self.unmeasured = 0, [], 1, 0, 0
        self.best = None  # the width chosen last (None while exploring)
        self.stepped: set[int] = set()  # the widths that ran a step in this generation
        self.fresh_stretch = True  # the step now running is the first of a stretch of its width
        # width -> (the width running when it was last timed, that width's step cost then): see per_step
        self.anchors: dict[int, tuple[int, float]] = {}
        # the prior's tokens per step by width at this batch size, for each band of the output (equal shares of its
        # indices, in order), and the share of the output the row furthest behind had reached when this step began
        self.expected: dict[int, tuple[float, ...]] = {}
        self.position = 0.0
        self.attached = memory is None
        self.rows = 0  # the batch size (known once attached to a memory)

    def per_step(self, L: int) -> tuple[float, float]:
        """(tokens, seconds) per step at width L, 0 where not known. Tokens: with a prior, its extra tokens times this
        generation's `scale` (at most L); else as measured at L. Seconds: as measured at L."""
        if L in self.expected:
            tokens = min(float(L), 1.0 + self.scale() * (self._prior(L) - 1.0))
        else:
            tokens = self.tokens[L] / self.counted[L] if self.counted[L] > 0 else 0.0
        if not self.seconds[L]:
            return tokens, 0.0
        seconds = min(self.seconds[L])
        # a step's cost grows along a generation (attention over the prefix; emoji-image at 4 rows: AR 3.4 ms at
        # step 30, 4.6 at step 90): a width timed a while ago is judged by its cost then times how much the width
        # running then has grown since, not against today's cost of the others
        anchor, then = self.anchors.get(L, (L, 0.0))
        if anchor != L and self.seconds[anchor] and then > 0:
            seconds *= min(self.seconds[anchor]) / then
        return tokens, seconds

    def _prior(self, L: int) -> float:
        """The prior's tokens per step at width L in the band of the output the step now running starts in."""
        return self.expected[L][self._band()]

    def _band(self) -> int:
        """The band (of the prior's equal shares of the output) the row furthest behind is in."""
        bands = len(next(iter(self.expected.values())))
        return min(int(self.position * bands), bands - 1)

    def scale(self) -> float:
        """This generation's extra tokens per step over the prior's, pooled over every width's counted steps (each
        against the prior of its own band: the top rows of an emoji are hard at every width, and a scale that
        took them for a hard prompt kept 16 away from the easy rows below), with the prior itself (scale 1) as
        `prior_steps` steps at the mean of its extra tokens."""
        wide = [L for L in self.candidates if L > 1]
        pseudo = self.prior_steps * sum(sum(self.expected[L]) / len(self.expected[L]) - 1.0 for L in wide) \
            / max(len(wide), 1)
        measured = sum(self.tokens[L] - self.counted[L] for L in wide)  # extra tokens the steps committed
        expected = sum(self.prior_extra[L] for L in wide)  # what the prior expects of the same steps
        return (measured + pseudo) / (expected + pseudo) if expected + pseudo > 0 else 1.0

    @property
    def in_step(self) -> bool:
        """Keep a batch's rows in step (mmspec.loop.in_step_counts) while plain AR is the best width or the widths
        are being probed: a probe's or recheck's few wide steps would otherwise leave the rows out of step for the
        rest of the generation, and every AR step after them pays attention masks and per-row cache writes (8%
        of an AR step at 16 rows on emoji-image on a CPU)."""
        return self.best in (None, 1)

    def rate(self, L: int) -> float:
        tokens, seconds = self.per_step(L)
        return tokens / seconds if seconds > 0 else 0.0

    def start(self, session: "Session", state: "DecodeState") -> None:
        if not self.attached:
            self._recall(state)

    def _could_win(self, L: int) -> bool:
        """With a prior: whether width L, not timed, could beat the widths timed narrower at the least its step can
        cost: that of the widest of them plus the slope between the last two, bent as much again as it bent from the
        two before (with only two: at one row as much as it ever bends, `bend`; at a batch not at all), times
        `slack`. A step's cost is concave in its positions on a CPU at 1 row (emoji-image: 3.3, 4.6 and 5.9 ms at
        1, 4 and 16: the slope falls to a quarter) and nearly linear at many rows (emoji-video at 8 rows: 8, 14 and
        34 ms, then 106 at 64, where the bent line says 86; emoji-image at 16 rows: 9.4 and 14 ms at 1 and 4, and 28
        at 16, where it says 17; at 8 rows 5, 7.5, 13 and 21 ms at 1, 4, 8 and 16: a bend of 0.25 had the prior's
        later rows probe 8 and 16 there, 14 steps at 2.5-4x an AR step)."""
        ran = [W for W in self.candidates if W < L and self.seconds[W]]
        if not ran:
            return True
        if self.rows > 1 and len(ran) < self.candidates.index(L):
            # at a batch, never past a narrower width not timed (it could not win, or has not run): the line through
            # costs timed early in a generation is too flat later on (emoji-video at 8 rows: 64 judged at 66 ms
            # from 8 and 16 timed near the start, where 16 now cost 45 ms and 64 ran at 137-167 ms, 3 steps lost
            # 8% of the generation), and the prior's tokens at a wider width are no surer than its cost
            return False
        cost = {W: self.per_step(W)[1] for W in ran}
        least = cost[ran[-1]]
        if len(ran) > 1:
            b, c = ran[-2:]
            slope = (cost[c] - cost[b]) / (c - b)
            bend = self.bend if self.rows <= 1 else 1.0
            if len(ran) > 2:
                a = ran[-3]
                before = (cost[b] - cost[a]) / (b - a)
                bend = min(slope / before, 1.0) if before > 0 else self.bend
            least += self.slack * max(slope, 0.0) * bend * (L - c)
        return self.per_step(L)[0] / least > max(map(self.rate, ran))

    def __call__(self, state: "DecodeState") -> int:
        if not self.attached:
            self._recall(state)
        if self.expected:  # the band of the output this step starts in (its row furthest behind)
            band = self._band()
            n, active = torch.stack([state.n, state.active.long()]).tolist()  # (one read)
            self.position = min(r if a else state.length for r, a in zip(n, active)) / state.length
            if self._band() != band and self.explored >= len(self.candidates) and self._pick() != self.best:
                # a new band: the prior's tokens changed for every width, and the best one with them. (Only then is
                # the plan dropped: a band of emoji-video lasts 6-10 steps, and a plan made afresh at each would
                # never reach its recheck.)
                self.plan = []
        if not self.plan:
            self.plan = self._next_plan()
        L = self.plan.pop(0)
        self.fresh_stretch = L != self.window or self.step == 0
        if L != self.window:
            self.unmeasured = self._warmup(L, self.window)
        self.window = L
        return L

    def _next_plan(self) -> list[int]:
        c = self.candidates
        if self.expected:  # probe the step cost of the narrowest width that could still win (plain AR first)
            while self.explored < len(c) and (self.seconds[c[self.explored]]  # timed by an earlier call
                                              or self.explored and not self._could_win(c[self.explored])):
                self.explored += 1
            if self.explored < len(c):
                L = c[self.explored]
                self.explored += 1
                return [L] * (self.probe + 1)
        elif self.explored < len(c):
            i = self.explored
            if i < 2 or self._plausible(c[i], c[i - 2], c[i - 1]):
                self.explored += 1
                return [c[i]] * (self.stretch + self._warmup(c[i], self.window))
        self.explored = len(c)
        best = self.best = self._pick()
        b = c.index(best)
        # a wider neighbour is rechecked only while it could still pay, by the costs measured now: at 8 rows a
        # stretch of 64 (and its warm-up of 16 steps) costs more than a generation's worth of what it could win
        # (with a prior, any width that is close enough: at plain AR, which measures no acceptance, the width that
        # would win by the prior is rechecked directly, not only through a neighbour's win; and at one row every
        # width not timed yet, whatever the scale says: a few steps of 4 in an emoji's hard top rows could pull the
        # scale down until no wider width could win, and plain AR, measuring nothing, never lifted it again: one
        # cold run of the README's image in three stayed at AR. Its stretch costs little there: its steps commit.)
        near = c if self.expected else c[max(b - 1, 0): b + 2]
        # (a width that never ran has lost nothing: it is due at once, not after a recheck's wait)
        due = [L for L in near if L != best and (self.measured[L] < 0 or self.step - self.measured[L] >= self.wait[L])
               and (L < best or b == 0 or self._plausible(L, c[b - 1], best))
               and (not self.expected or (self.hope * self.rate(L) >= self.rate(best) if self.seconds[L]
                                          else self.rows == 1 or self._could_win(L)))]
        self.wait[best] = self.recheck
        if not due:
            return [best] * self.recheck
        again = min(due, key=lambda L: (self.measured[L], -self.rate(L)))
        if self.expected and self.rows == 1 and (self.rate(again) > self.margin * self.rate(best) if self.seconds[again]
                                                 else self._could_win(again)):
            # at one row, a width that wins by the prior where the output now is (a new band, or a cost timed long
            # ago) runs at once: its steps commit too. (Not at a batch: there a wide step costs 2-4x an AR step, and
            # the least a width not timed can cost is no bound, its cost growing faster than its positions: on
            # emoji-video at 8 rows 32 ran at 64-88 ms where the line through 8 and 16 said 50.)
            return [again] * (self.stretch + self._warmup(again, best))
        # a losing width waits twice as long for its next recheck; not at one row with a prior, where a recheck of a
        # wide width is cheap (its steps commit too) and plain AR, measuring no acceptance, would otherwise miss the
        # easier regions of the output (the top of an emoji is hard, its middle easy)
        if not (self.expected and self.rows == 1):
            self.wait[again] = min(2 * self.wait[again], self.max_wait)
        return [best] * self.recheck + [again] * (self.stretch + self._warmup(again, best))

    def _pick(self) -> int:
        """The best width by what is known now (the one running unless another wins clearly)."""
        c = self.candidates
        # among the widths timed lately (and the one running): a step's cost grows along a generation, most at many
        # rows and wide windows (attention over the prefix: on emoji-video at 8 rows, 16 costs 27 ms at step 10
        # and 58 ms at step 90), so a cost timed long ago flatters its width; a neighbour's recheck times it anew
        ran = [L for L in c if self.seconds[L] and (self.step - self.measured[L] <= self.fresh or L == self.best)]
        ran = ran or [self.best or 1]
        best = ran[0]
        # a wider window must win clearly: its measured tokens are noisier and its mistakes dearer. (With a prior its
        # tokens are the prior's, scaled by every step, and a tie goes to the wider: only a speculative width measures
        # acceptance. On emoji-image at 1 row, 16 and AR tie at the prior's average; plain AR then learns nothing of
        # the prompt, and "red heart", where 16 is 1.5x AR, stayed at AR for 180 steps.)
        need = 1.0 if self.expected else self.margin
        for L in ran[1:]:
            if self.rate(L) > need * self.rate(best):
                best = L
        # and any width must win clearly against the one running: a neighbour's stretch is a few bursty steps, and
        # a switch on their luck costs more than the margin (at 1 row on emoji-image, 16 fell back to 4 that way)
        if self.best is not None and self.rate(best) <= self.margin * self.rate(self.best):
            best = self.best
        return best

    def _warmup(self, L: int, before: int) -> int:
        """Steps after a change of width from `before` to L whose tokens do not count. Widening: until the slots
        it opened, fresh fills, have moved to the front of the window with Jacobi iterations behind them.
        Narrowing: until the slots the wider window refined have been committed or replaced."""
        if L == before:
            return 0
        return max(self.warmup, L // 4) if L > before else self.warmup

    def _plausible(self, L: int, a: int, b: int) -> bool:
        """Whether width L, wider than the widths a < b measured last, could beat the best so far. Its step cost is
        as measured where it ran, else extrapolated linearly from a and b."""
        (_, cost_a), (tokens_b, cost_b), (_, cost) = self.per_step(a), self.per_step(b), self.per_step(L)
        if cost == 0:
            if cost_a == 0 or cost_b == 0:
                return False
            cost = cost_b + (L - b) * max(cost_b - cost_a, 0.0) / (b - a)
        return max(map(self.rate, self.candidates)) * cost <= self.growth * tokens_b

    def _recall(self, state: "DecodeState") -> None:
        """Share the memory's measurements and recheck waits for this batch shape; widths measured before count
        as explored, and a width that kept losing stays rarely rechecked (a render job's later batches); and the
        memory's prior for it."""
        self.rows = state.batch_size
        prior = self.memory.prior_for(state)
        if prior and self.rows == 1:
            # a Jacobi window opened after plain AR commits little in its first steps, then catches up in a burst once
            # its drafts are refined (emoji-image at 16: 1.61 tokens a step counted after a warm-up of 4, 2.30 after
            # 8, 1.86 held): a stretch twice as long measures about what the width gives held. (Its steps commit too.
            # On real generations timed by a fixed cost per width: 0.99x -> 1.03x of `ar`, benchmarks/README.md)
            self.stretch = self.one_row * self.stretch
        elif self.rows > 1:
            # a batch's progress is the least of every row's bursty tokens, and a switch opens
            # fresh slots in every row: on emoji-video at 8 rows (the four prompts x 2) 8 and 16 tie by the prior and
            # `auto` kept switching between them on a few steps' luck. A switch that must win by 15%: 1.10-1.13x ->
            # 1.16-1.17x of `ar` by benchmarks/policy_sim.py (2 + 4 seeds; fixed 8 1.25x)
            self.margin = self.batch_margin
        self.tokens, self.counted, self.prior_extra, self.seconds, self.wait = self.memory.measurements(
            state, self.candidates, self.recheck)
        if prior:
            self.expected = prior_at(prior, state.batch_size, self.candidates)
        for L in self.candidates:
            if self.seconds[L]:
                self.measured[L] = 0
        if not self.expected and self.seconds[self.candidates[0]]:  # (with a prior, probing skips what ran)
            self.explored = len(self.candidates)
        self.attached = True

    def observe(self, state, k, seconds) -> None:
        W = self.window
        self.step += 1
        self.measured[W] = self.step
        # a step's cost is the least of the last few: other work on the machine only ever adds time, and on a shared
        # 2-core CPU one step in three of a probe took 2-3x the others (one slow probe kept the README's image at
        # plain AR). A width's first step in a generation pays one-off costs (allocations, new shapes for the
        # kernels: 9 ms against 6 for 16 on emoji-image at 1 row): it is not timed.
        if self.fresh_stretch:  # a new stretch of W is timed afresh: a cost of 80 steps ago (or of an earlier call),
            self.seconds[W] = []  # when attention had a shorter prefix to read, would be the least and flatter W
        if W in self.stepped:
            self.seconds[W] = (self.seconds[W] + [seconds])[-self.kept:]
            anchor = self.best or 1  # a probe or recheck is judged against the width running around it
            if W != anchor and self.seconds[anchor]:
                self.anchors[W] = (anchor, min(self.seconds[anchor]))
            else:  # the running width's own steps: its cost is as timed now
                self.anchors.pop(W, None)
        self.stepped.add(W)
        if self.step == 1:
            return  # nor are the first step's tokens counted
        if self.unmeasured > 0:
            self.unmeasured -= 1
            return
        progress = batch_progress(state, k)
        if progress is None:
            return
        self.tokens[W] = self.memory_of_tokens * self.tokens[W] + progress[0]
        self.counted[W] = self.memory_of_tokens * self.counted[W] + 1
        extra = self._prior(W) - 1.0 if W in self.expected else 0.0
        self.prior_extra[W] = self.memory_of_tokens * self.prior_extra[W] + extra


def batch_progress(state: "DecodeState", k: torch.Tensor) -> "tuple[int, int] | None":
    """(tokens, start): how far a step moved the batch's rearmost row, and where it stood before: the least committed
    length over the rows that took part in the step (ran, or waited in step), before and after it (k [B] per row,
    after the commit). None when no row committed. At one row, what it committed.

    A batch is done when its last row is, and the least length goes from 0 to N without ever counting a token twice,
    so at a fixed width N / steps is exactly its mean advance. (What the row furthest behind committed, counted
    before, also credited a wide window's burst that only left another row furthest behind: the shipped prior of
    emoji-video at 8 rows fell from 5.16 to 4.68 tokens a step at 16 and from 3.36 to 3.15 at 8 when re-measured with
    this count.) In Python over one read of the [B] counts: as torch ops it took 1.5% of a generation at 8 rows, and
    in numpy 2% at 4 rows on a host where a small op costs 5-15 us."""
    counts = torch.stack([k, state.n, state.active.long()]).tolist()  # [3][B]
    if not any(counts[0]):
        return None
    rows = [(n - k, n) for k, n, active in zip(*counts) if k > 0 or active]  # (before, after) of each that took part
    before = min(b for b, _ in rows)
    return min(n for _, n in rows) - before, before


PRIOR_FILE = "window-prior.json"


Prior = dict[int, dict[int, "float | list[float]"]]  # batch size -> window -> tokens per step (overall or by band)


def load_prior(folder: "str | Path", greedy: bool = False) -> dict[str, Prior]:
    """A model folder's acceptance prior (its `window-prior.json`, written by models/recipes/window_prior.py):
    method -> batch size -> window -> tokens per step by which the batch's rearmost row moved, under the model's
    default sampling (`greedy`: at temperature 0, for the methods the file measured so; {} for the others), by band
    of the output where the file has them (steps by where they start: the top rows of an image are harder than the
    rest), else overall. {} when the folder has none."""
    path = Path(folder) / PRIOR_FILE
    if not path.is_file():
        return {}
    saved = json.loads(path.read_text())
    first = "greedy_" if greedy else ""
    saved = {**saved.get(f"{first}tokens_per_step", {}), **saved.get(f"{first}tokens_per_step_by_band", {})}
    return {method: {int(rows): {int(L): _floats(t) for L, t in by_window.items()} for rows, by_window in by_rows.items()}
            for method, by_rows in saved.items()}


def prior_at(prior: Prior, rows: int, windows: list[int]) -> dict[int, tuple[float, ...]]:
    """A method's prior (batch size -> window -> tokens per step, overall or by band) at a batch of `rows` for each
    window, by band (one band where the prior is overall): from the prior's batch size nearest in ratio,
    interpolated linearly in log L between its windows, held beyond them."""
    near = prior[min(prior, key=lambda R: (abs(math.log(R / rows)), R))]
    known = sorted(near)
    bands = np.array([np.atleast_1d(near[W]) for W in known], dtype=float)  # [windows, bands]
    x = [math.log2(W) for W in known]
    return {L: tuple(float(np.interp(math.log2(L), x, band)) for band in bands.T) for L in windows}


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


class WindowMemory:
    """AutoWindow's measurements kept across generations: decayed tokens and the steps they were counted over, the
    seconds of the last timed steps, and the steps a losing window waits before its next recheck, per window, for
    each batch shape (rows, CFG or not, greedy or not). One per pipeline and method, i.e. per model, device and
    method. Its `prior` (batch size -> window -> tokens per step, from `load_prior`; `greedy_prior` at temperature
    0) is what is known of the method on the model before anything is measured.

    With a `path`, the measurements are read from that JSON file when the memory is made, and `save()` writes
    them back, so that the next process on the same machine (the next CLI call, a job's next run) starts from
    the best known window instead of exploring from plain AR. A file that cannot be read is set aside with a
    warning: it only holds timings, and measuring again gives them back.
    """

    fields = ("tokens", "counted", "prior_extra", "seconds", "wait")
    # of the file's fields (1: decayed step seconds; 2: no prior_extra; 3: no greedy in a shape): a pipeline names its
    # files with it
    version = 4

    def __init__(self, path: "str | Path | None" = None, prior: "Prior | None" = None,
                 greedy_prior: "Prior | None" = None):
        self.path = Path(path) if path is not None else None
        self.prior, self.greedy_prior = prior or {}, greedy_prior or {}
        self.shapes: dict[tuple, tuple[dict, ...]] = {}
        if self.path is not None and self.path.is_file():
            try:
                saved = json.loads(self.path.read_text())
                self.shapes = {(int(rows), bool(cfg), bool(greedy)): tuple(
                    {int(L): _floats(v) for L, v in shape[f].items()} for f in self.fields)
                    for rows, cfg, greedy, shape in saved["shapes"]}
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                warnings.warn(f"ignoring the window measurements in {self.path} ({err!r}); measuring afresh")
                self.shapes = {}

    def measurements(self, state: "DecodeState", windows: list[int], recheck: int) -> tuple[dict, ...]:
        """(tokens, counted, prior_extra, seconds, wait) by window for the state's batch shape: shared dicts the
        policy updates (AutoWindow's)."""
        shape = self.shapes.setdefault(self._shape(state), tuple({} for _ in self.fields))
        for values, empty in zip(shape, (0.0, 0.0, 0.0, None, recheck)):
            for L in windows:
                values.setdefault(L, [] if empty is None else empty)
        return shape

    def prior_for(self, state: "DecodeState") -> Prior:
        """The prior for the state's sampling: the greedy one at temperature 0 where there is one (greedy text copies
        and drafts far better: on code-text at one row and window 8, `lookup` 1.72 against 1.07 tokens per step
        sampled, `eagle` 3.29 against 2.58)."""
        return self.greedy_prior if state.sampling.temperature == 0 and self.greedy_prior else self.prior

    @staticmethod
    def _shape(state: "DecodeState") -> tuple[int, bool, bool]:
        """Rows, CFG, greedy: what changes a step's cost or its tokens."""
        return state.batch_size, bool(state.sampling.cfg), state.sampling.temperature == 0

    def save(self) -> None:
        """Write the measurements to `path` (atomically: a concurrent reader sees the old file or the new one)."""
        if self.path is None or not self.shapes:  # nothing measured (e.g. a method with a fixed window)
            return
        shapes = [[*shape, dict(zip(self.fields, values))] for shape, values in self.shapes.items()]
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"shapes": shapes}))
            os.replace(tmp, self.path)
        except OSError as err:  # a read-only home must not fail a generation that is done
            warnings.warn(f"could not keep the window measurements in {self.path} ({err}); set MMSPEC_WINDOW_CACHE "
                          "to a writable folder, or to off")


def _floats(value) -> "float | list[float]":
    return [float(v) for v in value] if isinstance(value, list) else float(value)


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
    if not all(callable(getattr(policy, f, None)) for f in ("start", "observe")):
        raise ValueError("a window policy needs max_window, start(session, state), __call__(state) and "
                         "observe(state, k, seconds)")
    return policy

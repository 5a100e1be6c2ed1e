"""AutoWindow: the window that commits the most tokens per second, picked at every step from what its Estimate
measured. Its rules are in docs/methods.md ("Windows"); the figures they rest on in benchmarks/README.md."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mmspec.window.base import MAX_WINDOW
from mmspec.window.estimate import Estimate
from mmspec.window.memory import WindowMemory, prior_at

if TYPE_CHECKING:
    from mmspec.adapters.base import Session
    from mmspec.state import DecodeState

AUTO_WIDEST = 32  # "auto"'s widest window where the caller knows no better one (a pipeline gives its model's)


@dataclass(frozen=True)
class AutoConfig:
    """AutoWindow's tunables. `for_batch` picks the variant for a batch size and prior before the first step."""
    stretch: int = 4  # measured steps per stretch of a candidate
    warmup: int = 2  # at least this many steps after a change of L have their tokens not counted (`_warmup`)
    # steps at the best window between stretches of a neighbour: a stretch costs wide steps at a batch, and at one
    # row plain AR's stretches in the hard top rows of an image would keep rechecking candidates that lose there
    recheck: int = 48
    max_wait: int = 4 * 48  # the longest a losing neighbour waits for its next stretch
    margin: float = 1.05  # a wider window is preferred only when its throughput is this much higher (at one row)
    batch_margin: float = 1.15  # the same at a batch: its progress is the least of every row's bursty tokens
    growth: float = 2.5  # the most a 4x wider window is assumed to raise the tokens per step
    fresh: int = 48  # an L is picked only if it ran this many steps ago at most (or runs now)
    slack: float = 0.85  # the share of a step's extrapolated extra cost a wider L is sure to pay (`_could_win`)
    bend: float = 0.25  # at one row, the least a step's cost per extra position falls from one L to the next
    probe: int = 3  # with a prior, steps that measure an L's cost (after its first, which is not timed)
    hope: float = 1.25  # with a prior, a neighbour that ran is rechecked only while its estimate is this close
    one_row: int = 2  # with a prior at one row, stretches are this many times longer

    def for_batch(self, rows: int, group: int, prior: bool) -> "AutoConfig":
        """The variant for `rows` rows whose tokens count in groups of `group` (mmspec.window.batch_progress). With
        a prior at one row a stretch is `one_row` times longer: a Jacobi window opened after plain AR commits little
        in its first steps, then catches up in a burst once its drafts are refined, and its steps commit too. Where a
        group is many rows a switch must win by `batch_margin`: a group moves by the least of its rows' bursty tokens,
        and where two candidates tie by the prior it must not follow a few steps' luck (rows that each count alone
        are a mean of bursts, steadier than one row's)."""
        if prior and rows == 1:
            return replace(self, stretch=self.one_row * self.stretch)
        if group > 1:
            return replace(self, margin=self.batch_margin)
        return self


class AutoWindow:
    """Pick L to maximise committed tokens per second, measured on the running generation (`estimate`: what is known
    of each L, tokens and seconds per step). The rules:

    - Exploring (no prior): from L = 1 (plain AR), each wider candidate (1, 4, 8, 16, ... up to max_window) runs a
      stretch while it could plausibly win (`_plausible`: its extrapolated step cost times the best throughput asks
      for at most `growth` times the last L's tokens per step).
    - Probing (with a prior in the memory, `load_prior`): only step costs are unknown; candidates are timed narrowest
      first, `probe` steps each, while they could win at the least their step can cost (`_could_win`).
    - Settled: the best L runs `recheck` steps, then a neighbour a stretch (acceptance changes along a
      generation); a neighbour that loses waits twice as long, up to `max_wait` (not at one row with a prior, where
      a recheck's steps commit too). An L never run is due at once; at a batch plain AR is always due after its
      wait, since every choice is made against its cost.
    - Keeping: a wider window must beat a narrower one by `margin`, and any L but plain AR (whose step commits
      exactly one token) must beat the one running by `margin` to replace it (`_pick`).
    - Warm-up: the steps right after a change of L do not count (`_warmup`).
    - With a WindowMemory the measurements carry over between generations of the same batch shape; where the prior
      is given by band of the output, a new band drops the queue when its best L differs.
    """

    def __init__(self, max_window: int = AUTO_WIDEST, memory: "WindowMemory | None" = None,
                 candidates: "list[int] | None" = None, config: AutoConfig = AutoConfig()):
        if not 1 <= max_window <= MAX_WINDOW:
            raise ValueError(f"max_window must be in [1, {MAX_WINDOW}], got {max_window}")
        self.max_window, self.memory, self.config = max_window, memory, config
        # by default plain AR, 4, then every doubling: the best L is often between powers of 4
        candidates = candidates or [1] + [4 << i for i in range(7)]
        if 1 not in candidates or not all(isinstance(x, int) and x >= 1 for x in candidates):
            raise ValueError(f"candidates must be positive ints including 1 (plain AR), got {candidates!r}")
        self.candidates = sorted({x for x in candidates if x <= max_window} | {max_window})
        self.base = config  # the tunables before `AutoConfig.for_batch`
        self.window, self.step, self.unmeasured = 1, 0, 0  # the L running, steps run, uncounted steps after a change
        self.fresh_stretch = True  # the step now running is the first of a stretch of its L
        self.tracks: dict[tuple[int, int], tuple] = {}  # (rows, group) -> the TRACK of a batch shape not running now
        self.rows = 0  # the batch shape decided for (see `shape`): 0 before the first step
        self.group = 0  # the rows of a group its tokens count by (see `grouped`)
        self.peak = 0  # the most rows a step of this decode has run
        self._fresh(0, 0)

    # what the policy knows and plans for one batch shape: a decode is decided on the costs of the rows its steps run
    # (a lone demo visitor in an engine of 16 places is a one-row call, not a 16-row batch), each shape on its own
    # measurements, picked up where they were left when rows joining change the shape
    TRACK = ("rows", "group", "config", "estimate", "measured", "wait", "explored", "queue", "best")

    def _fresh(self, rows: int, group: int) -> None:
        self.rows, self.group, self.config = rows, group, self.base
        self.estimate = Estimate(self.candidates)
        self.measured = {L: -1 for L in self.candidates}  # the step at which each L last ran
        self.wait = {L: self.base.recheck for L in self.candidates}  # steps before a losing L runs again
        self.explored, self.queue = 0, []
        self.best = None  # the L chosen last (None while exploring)

    def shape(self, state: "DecodeState") -> int:
        """The batch shape the steps' costs follow: the most rows a step of this decode has run (`state.running`;
        rows that finish leave the forwards, an engine's rows join), rounded up to a power of two within the batch.
        It grows as rows join and does not shrink as they finish: a batch's last rows are decided as the batch they
        were (a fresh shape for its last few steps would explore more than it could find there)."""
        self.peak = max(self.peak, state.running)
        return min(1 << (self.peak - 1).bit_length(), state.batch_size)

    def grouped(self, state: "DecodeState", rows: int) -> int:
        """The rows of a group the step's tokens count by (`state.groups`, mmspec.window.batch_progress): of the
        largest group over the batch's places, rounded up to a power of two within `rows`; `rows` where the batch is
        one group. A group's tokens per step at L are a batch's of as many rows (a row's own tokens are the same in
        any batch), so its prior is the prior at that batch size."""
        if state.groups is None:
            return rows
        return min(1 << (max(Counter(state.groups).values()) - 1).bit_length(), rows)

    def _switch(self, state: "DecodeState", rows: int, group: int) -> None:
        """Decide for `rows` in groups of `group` from now on: the shape's track where it ran before (its queue
        dropped: planned for other steps), else a fresh one (`_recall`)."""
        if self.rows:
            self.tracks[self.rows, self.group] = tuple(getattr(self, name) for name in self.TRACK)
        if (rows, group) in self.tracks:
            for name, value in zip(self.TRACK, self.tracks.pop((rows, group))):
                setattr(self, name, value)
            self.queue = []
        else:
            self._fresh(rows, group)
            self._recall(state)

    @property
    def in_step(self) -> bool:
        """Keep a batch's rows in step (mmspec.verify_step.in_step_counts) while plain AR is the best L or the
        candidates are probed: a probe's or recheck's few wide steps would otherwise leave the rows out of step for the
        rest of the generation, and every AR step after them pays attention masks and per-row cache writes (8%
        of an AR step at 16 rows on emoji-image on a CPU)."""
        return self.best in (None, 1)

    def start(self, session: "Session", state: "DecodeState") -> None:
        self.peak = 0  # a new decode (the batch shape is known at its first step: `__call__`)

    def _could_win(self, L: int) -> bool:
        """With a prior: whether the candidate L, not timed, could beat the candidates timed narrower at the least its
        step can cost: that of the widest of them plus the slope between the last two, bent as much again as it bent
        from the two before (with only two: at one row as much as it ever bends, `bend`; at a batch not at all, and
        flat from plain AR, see below), times `slack`. A step's cost is concave in its positions on a CPU at one row
        (the slope falls to about a quarter from 1 to 16 positions) and nearly linear, or worse, between wide
        candidates at many rows, where a bent line would probe wide candidates whose steps cost several AR steps each.

        At a batch, a line from plain AR and one wider L says nothing of the cost per position: a step of 1
        drafts and verifies nothing, a step of any wider window pays its drafter and verifier once, whatever its
        L, and of the climb from AR to the wider L that fixed cost is most on a GPU (where a step of 16
        costs about what a step of 4 does) and little on a CPU (where it costs about 3 times as much). Only the cost
        of the L timed is sure then, and a stretch of the next L times the slope."""
        est = self.estimate
        ran = [x for x in self.candidates if x < L and est.seconds[x]]
        if not ran:
            return True
        if self.rows > 1 and len(ran) < self.candidates.index(L):
            # at a batch, never past a narrower L not timed (it could not win, or has not run): the line through
            # costs timed early in a generation is too flat later on, as attention reads a longer prefix, and the
            # prior's tokens at a wider L are no surer than its cost
            return False
        cost = {x: est.per_step(x)[1] for x in ran}
        least = cost[ran[-1]]
        if len(ran) > 1:
            b, c = ran[-2:]
            slope = (cost[c] - cost[b]) / (c - b)
            bend = self.config.bend if self.rows <= 1 else 0.0 if b == 1 else 1.0
            if len(ran) > 2:
                a = ran[-3]
                before = (cost[b] - cost[a]) / (b - a)
                bend = min(slope / before, 1.0) if before > 0 else self.config.bend
            least += self.config.slack * max(slope, 0.0) * bend * (L - c)
        return est.per_step(L)[0] / least > max(map(est.rate, ran))

    def __call__(self, state: "DecodeState") -> int:
        rows = self.shape(state)
        group = self.grouped(state, rows)
        if (rows, group) != (self.rows, self.group):
            self._switch(state, rows, group)
        est = self.estimate
        if est.expected:  # the band of the output this step starts in (its row furthest behind)
            band = est.band()
            est.locate(state)
            # a new band changes the prior's tokens at every L: the queue is dropped when the best L changes
            # with it, and only then (a band of emoji-video lasts 6-10 steps: a queue dropped at each would never
            # reach its recheck)
            if est.band() != band and self.explored >= len(self.candidates) and self._pick() != self.best:
                self.queue = []
        if not self.queue:
            self.queue = self._probe() or self._explore() or self._settle()
        L = self.queue.pop(0)
        self.fresh_stretch = L != self.window or self.step == 0
        if L != self.window:
            self.unmeasured = self._warmup(L, self.window)
        self.window = L
        return L

    def _probe(self) -> "list[int] | None":
        """With a prior: the steps that time the narrowest L not timed yet that could still win (plain AR
        first); None when none is left."""
        c, est = self.candidates, self.estimate
        if not est.expected:
            return None
        while self.explored < len(c) and (est.seconds[c[self.explored]]  # timed by an earlier call
                                          or self.explored and not self._could_win(c[self.explored])):
            self.explored += 1
        if self.explored == len(c):
            return None
        self.explored += 1
        return [c[self.explored - 1]] * (self.config.probe + 1)

    def _explore(self) -> "list[int] | None":
        """Without a prior: a stretch of the next wider candidate while it could plausibly win; None once none is
        left (exploring ends at the first that could not)."""
        c, i = self.candidates, self.explored
        if self.estimate.expected or i >= len(c) or not (i < 2 or self._plausible(c[i], c[i - 2], c[i - 1])):
            self.explored = len(c)
            return None
        self.explored += 1
        return [c[i]] * (self.config.stretch + self._warmup(c[i], self.window))

    def _settle(self) -> list[int]:
        """The best L by what is known now, then a stretch of the L most overdue for a recheck (`_due`). An
        L not timed that could win where the output now is runs at once, with a prior: at a batch a recheck waits
        longer than a band of the output, and an L left untimed in the hard first bands would miss the easy ones;
        at one row also a timed L that wins by the prior there by `margin` (its steps commit too)."""
        est, config = self.estimate, self.config
        best = self.best = self._pick()
        due = self._due(best)
        self.wait[best] = config.recheck
        if not due:
            return [best] * config.recheck
        again = min(due, key=lambda L: (self.measured[L], -est.rate(L)))
        stretch = [again] * (config.stretch + self._warmup(again, best))
        if est.expected and (self._could_win(again) if not est.seconds[again] else
                             self.rows == 1 and est.rate(again) > config.margin * est.rate(best)):
            return stretch
        # a losing L waits twice as long; not at one row with a prior, where a recheck's steps commit too and
        # plain AR, measuring no acceptance, would otherwise miss the easier regions of the output
        if not (est.expected and self.rows == 1):
            self.wait[again] = min(2 * self.wait[again], config.max_wait)
        return [best] * config.recheck + stretch

    def _due(self, best: int) -> list[int]:
        """The candidates due for a recheck beside `best`: its neighbours (with a prior, any L), each once its wait
        is over (an L never run at once), and only while it could still pay by the costs measured now: a wider one
        `_plausible`; with a prior one timed within `hope` of the best, one not timed that `_could_win` (at one row
        any: a few hard steps could pull the scale down until none could, and plain AR never lifts it again), and
        at a batch plain AR always, since every choice is made against its cost."""
        c, est = self.candidates, self.estimate
        b = c.index(best)
        near = c if est.expected else c[max(b - 1, 0): b + 2]
        return [L for L in near if L != best and (self.measured[L] < 0 or self.step - self.measured[L] >= self.wait[L])
                and (L < best or b == 0 or self._plausible(L, c[b - 1], best))
                and (not est.expected or L == 1 and self.rows > 1
                     or (self.config.hope * est.rate(L) >= est.rate(best) if est.seconds[L]
                         else self.rows == 1 or self._could_win(L)))]

    def _pick(self) -> int:
        """The best L by what is known now, among the candidates timed within `fresh` steps and the one running (a
        step's cost grows along a generation, so a cost timed long ago flatters its L). A wider L must win
        by `margin` (its tokens are noisier, its mistakes dearer); with a prior a tie goes to the wider (only a
        speculative L measures acceptance). To replace the L running, a speculative L must win by
        `margin` (a neighbour's stretch is a few bursty steps), plain AR only has to win (its step commits exactly one
        token, so its rate is as sure as its cost)."""
        est, margin = self.estimate, self.config.margin
        ran = [L for L in self.candidates
               if est.seconds[L] and (self.step - self.measured[L] <= self.config.fresh or L == self.best)]
        ran = ran or [self.best or 1]
        best = ran[0]
        need = 1.0 if est.expected else margin
        for L in ran[1:]:
            if est.rate(L) > need * est.rate(best):
                best = L
        if self.best is not None and best != self.best and \
                est.rate(best) <= (1.0 if best == 1 else margin) * est.rate(self.best):
            best = self.best
        return best

    def _warmup(self, L: int, before: int) -> int:
        """Steps after a change of window from `before` to L whose tokens do not count. Widening: until the slots
        it opened, fresh fills, have moved to the front of the window with Jacobi iterations behind them.
        Narrowing: until the slots the wider window refined have been committed or replaced."""
        if L == before:
            return 0
        return max(self.config.warmup, L // 4) if L > before else self.config.warmup

    def _plausible(self, L: int, a: int, b: int) -> bool:
        """Whether the candidate L, wider than the candidates a < b measured last, could beat the best so far by
        `margin` (what it needs to take over). Its step cost is as measured where it ran, else extrapolated linearly
        from a and b."""
        est = self.estimate
        (_, cost_a), (tokens_b, cost_b), (_, cost) = est.per_step(a), est.per_step(b), est.per_step(L)
        if cost == 0:
            if cost_a == 0 or cost_b == 0:
                return False
            cost = cost_b + (L - b) * max(cost_b - cost_a, 0.0) / (b - a)
        return max(map(est.rate, self.candidates)) * cost * self.config.margin <= self.config.growth * tokens_b

    def _recall(self, state: "DecodeState") -> None:
        """The tunables' variant for the batch shape and prior (with or without a memory: a raw target's call at 8
        rows keeps a batch's margins too); with a memory, share its measurements and recheck waits for this batch
        shape: candidates measured before count as explored, and an L that kept losing stays rarely rechecked (a
        render job's later batches); and the memory's prior for it."""
        est = self.estimate
        prior = self.memory.prior_for(state) if self.memory is not None else {}
        self.config = self.base.for_batch(self.rows, self.group, bool(prior))
        if self.memory is None:
            return
        est.tokens, est.counted, est.prior_extra, est.seconds, est.anchors, self.wait = self.memory.measurements(
            state, self.rows, self.group, self.candidates, self.config.recheck)
        if prior:
            est.expected = prior_at(prior, self.group, self.candidates)
        for L in self.candidates:
            if est.seconds[L]:
                self.measured[L] = self.step
        if not est.expected and est.seconds[self.candidates[0]]:  # (with a prior, probing skips what ran)
            self.explored = len(self.candidates)

    def observe(self, state, k, seconds) -> None:
        L = self.window
        self.step += 1
        self.measured[L] = self.step
        # a probe or recheck is timed against the L around it
        self.estimate.time(L, seconds, self.fresh_stretch, self.best or 1)
        if self.step == 1:
            return  # nor are the first step's tokens counted
        if self.unmeasured > 0:
            self.unmeasured -= 1
            return
        self.estimate.count(L, state, k)


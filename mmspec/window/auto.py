"""AutoWindow: the window that commits the most tokens per second, picked at every step from what its Estimate
measured; and `window_policy`, the one place a window argument ("auto", an int, a policy) becomes a policy."""
from __future__ import annotations

from typing import TYPE_CHECKING

from mmspec.window.base import MAX_WINDOW, FixedWindow, WindowPolicy
from mmspec.window.estimate import Estimate
from mmspec.window.memory import WindowMemory, prior_at

if TYPE_CHECKING:
    from mmspec.adapters.base import Session
    from mmspec.state import DecodeState

AUTO_WIDEST = 32  # "auto"'s widest window where the caller knows no better one (a pipeline gives its model's)


class AutoWindow(Estimate):
    """Pick L to maximise committed tokens per second, measured on the running generation (what is known of each
    width, tokens and seconds per step, is its `Estimate`).

    Starting from L = 1 (plain AR), each wider candidate (1, 4, 8, 16, 32, ... up to max_window) runs a stretch while
    it could plausibly win: its step cost, extrapolated linearly in L from the two widths measured last, times the
    best throughput must not ask for more than `growth` times the tokens per step of the last width, so a batch too
    large for wide windows to pay never spends a stretch on them. Then the best one runs, with a stretch of a
    neighbouring width every `recheck` steps (acceptance changes along a generation); a neighbour that loses again
    waits twice as long for its next stretch, up to `max_wait` steps. A wider window must beat a narrower one by
    `margin` to be kept (a wide window kept on a lucky stretch costs most), and any window but plain AR (whose step
    commits exactly one token: no luck to guard against) must beat the one running by `margin` to replace it. The
    steps right after a change of width do not count (`_warmup`): after a widening its new slots start from fresh
    fills that a window kept at L would not have; after a narrowing its slots were refined by the wider window.

    With a `WindowMemory` (a pipeline keeps one for its model and device, on disk), the measurements carry over from
    one generation to the next of the same batch size, so a later call starts at the best known window instead of
    exploring from plain AR. When the memory holds an acceptance prior for the method (`load_prior`), the first
    generation need not explore either: what is left to learn is each width's step cost on this device at this
    batch size, and a couple of real steps tell it (`probe`; they commit tokens like any other). Widths are probed
    narrowest first, and only while they could win at the least their step can cost (`_could_win`). The neighbour
    rechecks then measure a width's step cost, and only while it could plausibly win (`hope`; plain AR at a batch
    always). Where the prior is given by band of the output, the region is the prior's business and the scale the
    prompt's: at a new band the plan is made afresh if the best width changes with it; at one row a width that wins
    by the prior where the output now is runs at once, not after a stretch of the width running.
    """

    stretch = 4  # measured steps per stretch of a candidate
    warmup = 2  # at least this many steps after a change of width have their tokens not counted (see _warmup)
    # steps at the best window between stretches of a neighbour: a stretch costs wide steps at a batch, and at one
    # row plain AR's stretches in the hard top rows of an image would keep rechecking widths that lose there
    recheck = 48
    max_wait = 4 * recheck  # the longest a losing neighbour waits for its next stretch
    margin = 1.05  # a wider window is preferred only when its throughput is this much higher (at one row)
    batch_margin = 1.15  # the same at a batch (see _recall)
    growth = 2.5  # the most a 4x wider window is assumed to raise the tokens per step
    fresh = recheck  # a width is picked only if it ran this many steps ago at most (or runs now)
    slack = 0.85  # the share of a step's extrapolated extra cost a wider width is sure to pay (see _could_win)
    bend = 0.25  # at one row, the least a step's cost per extra position falls from one width to the next
    probe = 3  # with a prior, steps that measure a width's cost (after its first, which is not timed)
    hope = 1.25  # with a prior, a neighbour that ran is rechecked only while its estimate is this close to the best
    one_row = 2  # with a prior at one row, stretches are this many times longer (see _recall)

    def __init__(self, max_window: int = AUTO_WIDEST, memory: "WindowMemory | None" = None,
                 widths: "list[int] | None" = None):
        if not 1 <= max_window <= MAX_WINDOW:
            raise ValueError(f"max_window must be in [1, {MAX_WINDOW}], got {max_window}")
        self.max_window, self.memory = max_window, memory
        # by default plain AR, 4, then every doubling: the best width is often between powers of 4
        widths = widths or [1] + [4 << i for i in range(7)]
        if 1 not in widths or not all(isinstance(W, int) and W >= 1 for W in widths):
            raise ValueError(f"widths must be positive ints including 1 (plain AR), got {widths!r}")
        super().__init__(sorted({W for W in widths if W <= max_window} | {max_window}))
        self.measured = {L: -1 for L in self.candidates}  # the step at which each width last ran
        self.wait = {L: self.recheck for L in self.candidates}  # steps before a losing width runs again
        self.explored, self.plan, self.window, self.step, self.unmeasured = 0, [], 1, 0, 0
        self.best = None  # the width chosen last (None while exploring)
        self.fresh_stretch = True  # the step now running is the first of a stretch of its width
        self.attached = memory is None
        self.rows = 0  # the batch size (known once attached to a memory)

    @property
    def in_step(self) -> bool:
        """Keep a batch's rows in step (mmspec.verify_step.in_step_counts) while plain AR is the best width or the widths
        are being probed: a probe's or recheck's few wide steps would otherwise leave the rows out of step for the
        rest of the generation, and every AR step after them pays attention masks and per-row cache writes (8%
        of an AR step at 16 rows on emoji-image on a CPU)."""
        return self.best in (None, 1)

    def start(self, session: "Session", state: "DecodeState") -> None:
        if not self.attached:
            self._recall(state)

    def _could_win(self, L: int) -> bool:
        """With a prior: whether width L, not timed, could beat the widths timed narrower at the least its step can
        cost: that of the widest of them plus the slope between the last two, bent as much again as it bent from the
        two before (with only two: at one row as much as it ever bends, `bend`; at a batch not at all, and flat from
        plain AR, see below), times `slack`. A step's cost is concave in its positions on a CPU at one row (the slope
        falls to about a quarter from 1 to 16 positions) and nearly linear, or worse, between wide widths at many
        rows, where a bent line would probe wide widths whose steps cost several AR steps each.

        At a batch, a line from plain AR and one wider width says nothing of the cost per position: a step of 1
        drafts and verifies nothing, a step of any wider window pays its drafter and verifier once, whatever its
        width, and of the climb from AR to the wider width that fixed cost is most on a GPU (where a step of 16
        costs about what a step of 4 does) and little on a CPU (where it costs about 3 times as much). Only the cost
        of the width timed is sure then, and a stretch of the next width times the slope."""
        ran = [W for W in self.candidates if W < L and self.seconds[W]]
        if not ran:
            return True
        if self.rows > 1 and len(ran) < self.candidates.index(L):
            # at a batch, never past a narrower width not timed (it could not win, or has not run): the line through
            # costs timed early in a generation is too flat later on, as attention reads a longer prefix, and the
            # prior's tokens at a wider width are no surer than its cost
            return False
        cost = {W: self.per_step(W)[1] for W in ran}
        least = cost[ran[-1]]
        if len(ran) > 1:
            b, c = ran[-2:]
            slope = (cost[c] - cost[b]) / (c - b)
            bend = self.bend if self.rows <= 1 else 0.0 if b == 1 else 1.0
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
            self.locate(state)
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
        # (a width that never ran has lost nothing: it is due at once, not after a recheck's wait). At a batch plain AR
        # is due after its wait whatever its estimate: every choice is made against its cost, and one timed dear
        # (say in a generation's first steps) would otherwise keep a batch wide for the rest of it
        due = [L for L in near if L != best and (self.measured[L] < 0 or self.step - self.measured[L] >= self.wait[L])
               and (L < best or b == 0 or self._plausible(L, c[b - 1], best))
               and (not self.expected or L == 1 and self.rows > 1
                    or (self.hope * self.rate(L) >= self.rate(best) if self.seconds[L]
                        else self.rows == 1 or self._could_win(L)))]
        self.wait[best] = self.recheck
        if not due:
            return [best] * self.recheck
        again = min(due, key=lambda L: (self.measured[L], -self.rate(L)))
        if self.expected and (self._could_win(again) if not self.seconds[again] else
                              self.rows == 1 and self.rate(again) > self.margin * self.rate(best)):
            # a width not timed that could win where the output now is, at the least its step can cost, runs at once:
            # at a batch a recheck waits a quarter of a generation or more, longer than a band of the output, and a
            # width left untimed in the hard first bands would miss the easy ones. At one row also a width timed that
            # wins by the prior where the output now is (a new band, or a cost timed long ago): its steps commit too.
            # (Not at a batch: there its stretch, timed to lose, costs wide steps.)
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
        # rows and wide windows (attention over the prefix), so a cost timed long ago flatters its width; a
        # neighbour's recheck times it anew
        ran = [L for L in c if self.seconds[L] and (self.step - self.measured[L] <= self.fresh or L == self.best)]
        ran = ran or [self.best or 1]
        best = ran[0]
        # a wider window must win clearly: its measured tokens are noisier and its mistakes dearer. (With a prior its
        # tokens are the prior's, scaled by every step, and a tie goes to the wider: only a speculative width measures
        # acceptance: were plain AR kept on a tie it would learn nothing of the prompt, and an easy prompt would stay
        # at AR.)
        need = 1.0 if self.expected else self.margin
        for L in ran[1:]:
            if self.rate(L) > need * self.rate(best):
                best = L
        # and a speculative width must win clearly against the one running: a neighbour's stretch is a few bursty
        # steps, and a switch on their luck costs more than the margin. Plain AR only has to win: its step commits
        # exactly one token, so its rate is as sure as its step cost, and a wide width it beats at all is losing (with
        # the margin, a batch that went wide stayed wide with AR up to 15% ahead)
        if self.best is not None and best != self.best and \
                self.rate(best) <= (1.0 if best == 1 else self.margin) * self.rate(self.best):
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
            # its drafts are refined: a stretch twice as long measures about what the width gives held (its steps
            # commit too)
            self.stretch = self.one_row * self.stretch
        elif self.rows > 1:
            # a batch's progress is the least of every row's bursty tokens, and a switch opens fresh slots in every
            # row: where two widths tie by the prior, a switch must win clearly, not on a few steps' luck
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
        self.time(W, seconds, self.fresh_stretch, self.best or 1)  # a probe or recheck against the width around it
        if self.step == 1:
            return  # nor are the first step's tokens counted
        if self.unmeasured > 0:
            self.unmeasured -= 1
            return
        self.count(W, state, k)


def window_policy(window: "int | str | WindowPolicy | None", widest: int = AUTO_WIDEST,
                  memory: "WindowMemory | None" = None) -> WindowPolicy:
    """An int (the same window at every step), "auto" or None (an AutoWindow of up to `widest` positions that starts
    from `memory`, what earlier calls learned) or a policy object, checked."""
    if window is None or window == "auto":
        return AutoWindow(max_window=widest, memory=memory)
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

"""What an auto window knows of each L it may choose: tokens and seconds per step, measured on the running generation
and scaled from the model's acceptance prior (mmspec.window.memory) where it has one."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from mmspec.state import DecodeState


class Estimate:
    """Tokens and seconds per step at each L of the `candidates`, for AutoWindow to decide on.

    Seconds per step (drafting, the forward over L positions at this batch size on this device, verification) are
    the least of each L's last `kept` timed steps: other work on the machine only ever adds time. Tokens per step
    are bursty (mostly 1, now and then a long accepted run), so they are a decayed average over many steps, each
    L over its own steps only: counting a step at a wider L' that commits k as min(k, L) would credit L with the
    Jacobi iterations its slots never get in a window of L. Tokens are how far a step moved the batch's rearmost row
    (`batch_progress`): a batch is done when its slowest row is.

    With a prior (`expected`: tokens per step at each L, for each band of the output), an L is judged by the
    prior's shape scaled by this generation: its extra tokens per step (over AR's one) are the prior's times one
    `scale`, measured by every step at any L. The prompt and the region of the output move every L's extra
    tokens together, so what each L happened to run on does not bias the choice.
    """

    kept = 9  # an L's step cost is the least of its last `kept` timed steps
    memory_of_tokens = 0.98  # decay of the token sums per counted step: tokens are bursty, only a long average tells
    prior_steps = 8  # the weight of the prior (scale 1) in `scale`, in measured steps

    def __init__(self, candidates: list[int]):
        self.candidates = candidates
        # per L: decayed sums of tokens, of the steps they were counted over and of the extra tokens the prior
        # expected of those steps (at their region of the output); the seconds of its last timed steps
        self.tokens, self.counted, self.prior_extra = ({L: 0.0 for L in candidates} for _ in range(3))
        self.seconds: dict[int, list[float]] = {L: [] for L in candidates}
        self.stepped: set[int] = set()  # the L that ran a step in this generation
        # L -> [the L running when it was last timed, that L's step cost then]: see per_step (kept with the seconds in
        # a WindowMemory, so that the next call compares L timed at different rows of the output)
        self.anchors: dict[int, list] = {}
        # the prior's tokens per step at each L at this batch size, for each band of the output (equal shares of its
        # indices, in order), and the share of the output the row furthest behind had reached when this step began
        self.expected: dict[int, tuple[float, ...]] = {}
        self.position = 0.0

    def per_step(self, L: int) -> tuple[float, float]:
        """(tokens, seconds) per step at L, 0 where not known. Tokens: with a prior, its extra tokens times this
        generation's `scale` (at most L); else as measured at L. Seconds: as measured at L."""
        if L in self.expected:
            tokens = min(float(L), 1.0 + self.scale() * (self._prior(L) - 1.0))
        else:
            tokens = self.tokens[L] / self.counted[L] if self.counted[L] > 0 else 0.0
        if not self.seconds[L]:
            return tokens, 0.0
        seconds = min(self.seconds[L])
        # a step's cost grows along a generation (attention over a longer prefix): an L timed a while ago is judged
        # by its cost then times how much the L running then has grown since, not against today's cost of others
        anchor, then = self.anchors.get(L, (L, 0.0))
        anchor = int(anchor)  # (a float as read back from a memory's file)
        if anchor != L and self.seconds[anchor] and then > 0:
            seconds *= min(self.seconds[anchor]) / then
        return tokens, seconds

    def _prior(self, L: int) -> float:
        """The prior's tokens per step at L in the band of the output the step now running starts in."""
        return self.expected[L][self.band()]

    def band(self) -> int:
        """The band (of the prior's equal shares of the output) the row furthest behind is in."""
        bands = len(next(iter(self.expected.values())))
        return min(int(self.position * bands), bands - 1)

    def scale(self) -> float:
        """This generation's extra tokens per step over the prior's, pooled over every L's counted steps (each
        against the prior of its own band: the top rows of an emoji are hard at every L, and a scale that
        took them for a hard prompt kept 16 away from the easy rows below), with the prior itself (scale 1) as
        `prior_steps` steps at the mean of its extra tokens."""
        wide = [L for L in self.candidates if L > 1]
        pseudo = self.prior_steps * sum(sum(self.expected[L]) / len(self.expected[L]) - 1.0 for L in wide) \
            / max(len(wide), 1)
        measured = sum(self.tokens[L] - self.counted[L] for L in wide)  # extra tokens the steps committed
        expected = sum(self.prior_extra[L] for L in wide)  # what the prior expects of the same steps
        return (measured + pseudo) / (expected + pseudo) if expected + pseudo > 0 else 1.0

    def rate(self, L: int) -> float:
        tokens, seconds = self.per_step(L)
        return tokens / seconds if seconds > 0 else 0.0

    def locate(self, state: "DecodeState") -> None:
        """Where the step about to run starts: the share of the output its row furthest behind has reached."""
        n, active = torch.stack([state.n, state.active.long()]).tolist()  # (one read)
        self.position = min(r if a else state.length for r, a in zip(n, active)) / state.length

    def time(self, L: int, seconds: float, fresh: bool, anchor: int) -> None:
        """A step at L took `seconds`; `fresh`: the first of a stretch of L, timed afresh (a cost of many steps
        ago, when attention had a shorter prefix to read, would be the least and flatter L); `anchor`: the L
        running around it, whose cost then judges L later (see per_step). An L's first step in a generation pays
        one-off costs (allocations, new shapes for the kernels) and is not timed."""
        if fresh:
            self.seconds[L] = []
        if L in self.stepped:
            self.seconds[L] = (self.seconds[L] + [seconds])[-self.kept:]
            if L != anchor and self.seconds[anchor]:
                self.anchors[L] = [anchor, min(self.seconds[anchor])]
            else:  # the running L's own steps: its cost is as timed now
                self.anchors.pop(L, None)
        self.stepped.add(L)

    def count(self, L: int, state: "DecodeState", k: torch.Tensor) -> None:
        """A step at L committed k [B] tokens per row: its advance of the rearmost row counts for L."""
        progress = batch_progress(state, k)
        if progress is None:
            return
        self.tokens[L] = self.memory_of_tokens * self.tokens[L] + progress[0]
        self.counted[L] = self.memory_of_tokens * self.counted[L] + 1
        extra = self._prior(L) - 1.0 if L in self.expected else 0.0
        self.prior_extra[L] = self.memory_of_tokens * self.prior_extra[L] + extra


def batch_progress(state: "DecodeState", k: torch.Tensor) -> "tuple[float, int] | None":
    """(tokens, start): how far a step moved the batch's rearmost row, and where it stood before: the least committed
    length over the rows that took part in the step (ran, or waited in step), before and after it (k [B] per row,
    after the commit). None when no row committed. At one row, what it committed. Where the rows are waited for in
    groups (`state.groups`: an engine's requests, or each row alone while rows wait for a place), the mean over the
    groups that took part of each one's rearmost advance; `start` is still the batch's rearmost row's.

    A batch is done when its last row is, and the least length goes from 0 to N without ever counting a token twice,
    so at a fixed L N / steps is exactly its mean advance (what the row furthest behind committed would also credit
    a wide window's burst that only leaves another row furthest behind). Rows that each give their place to a row
    waiting are done one by one: there the engine's throughput is the mean of the rows' own advances, which a wide
    window raises as the rows run (a row's tokens are its own at any batch) while the rearmost advance falls with
    every row added. In Python over one read of the [B] counts: a handful of small torch or numpy ops per step costs
    more than the count itself."""
    counts = torch.stack([k, state.n, state.active.long()]).tolist()  # [3][B]
    if not any(counts[0]):
        return None
    groups = state.groups or [0] * len(counts[0])
    spans: dict[int, list[int]] = {}  # group -> [least before, least after] over its rows that took part
    for committed, n, active, group in zip(*counts, groups):
        if committed > 0 or active:
            span = spans.setdefault(group, [n - committed, n])
            span[0], span[1] = min(span[0], n - committed), min(span[1], n)
    before = min(b for b, _ in spans.values())
    if len(spans) == 1:
        return next(iter(spans.values()))[1] - before, before
    return sum(a - b for b, a in spans.values()) / len(spans), before

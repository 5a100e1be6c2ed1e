"""The state of one batched generation, as drafters and verifiers see it."""
from __future__ import annotations

from dataclasses import dataclass, field
import torch

from mmspec.layouts import Layout
from mmspec.rng import Streams
from mmspec.sampling import Sampling


@dataclass
class DecodeState:
    layout: Layout
    max_window: int  # the widest window any step may use; seq and the caches have room for it
    vocab_size: int
    sampling: Sampling
    streams: Streams
    seq: torch.Tensor  # [B, N + max_window] committed tokens, then the current drafts (-1 = nothing yet)
    forced: torch.Tensor  # [B, N + max_window] token each row must have at each index (structural or given), or FREE
    # n, pending and active change in place (one address all generation long: a compiled step's CUDA graphs replay
    # over them; an output of one replay would be overwritten by the next), so a reader that keeps one clones it
    n: torch.Tensor = field(init=False)  # [B] committed tokens per row
    pending: torch.Tensor = field(init=False)  # [B] last committed token, fed first in the next window
    active: torch.Tensor = field(init=False)  # [B] rows still generating
    step: int = 0
    row_ids: "list[int] | None" = None  # [B] each row's index in its request (None: 0 .. B-1); hooks report by it
    # [B] the group each row is waited for with, as the caller sets it before a step: a group is done when its last row
    # is, so the window policy counts a step's progress as the mean over groups of each one's rearmost row's advance
    # (mmspec.window.batch_progress). None: the whole batch is one group (a call returns when its last row is done);
    # an engine whose finished rows give their places to rows waiting makes each row a group of its own
    groups: "list[int] | None" = None
    # the rows the next step's forwards run: the rows still running where rows that are done leave the forwards
    # (mmspec.adapters.rows), else all B; the loop sets it before asking the window policy (whose step costs follow it)
    running: int = field(init=False)
    any_forced: bool = field(init=False)  # any row has a forced token at all
    forced_run: torch.Tensor = field(init=False)  # [B, N + max_window] forced indices in a row from each index on
    forced_until: int = field(init=False)  # a step from which no active row has a forced index ahead (0: none)

    def __post_init__(self):
        B, device = self.seq.shape[0], self.seq.device
        self.forced_run = forced_runs(self.forced)
        forced_at = (self.forced >= 0).any(0).nonzero()
        self.forced_until = int(forced_at[-1]) + 1 if len(forced_at) else 0
        self.any_forced = self.forced_until > 0
        self.n = torch.zeros(B, dtype=torch.long, device=device)
        self.pending = torch.full((B,), -1, dtype=torch.long, device=device)
        self.active = torch.ones(B, dtype=torch.bool, device=device)
        self.running = B
        self.streams.live = self.active  # (the noise of rows not running is not hashed ahead: Streams.live)
        self.row_ids = list(range(B)) if self.row_ids is None else list(self.row_ids)

    def admit(self, rows: torch.Tensor, forced: torch.Tensor, seeds: list[int], row_ids: list[int]) -> None:
        """Rows `rows` [b] start a new request's rows (mmspec.engine: in the places of rows that finished): nothing
        committed, `forced` [b, N + max_window] their structural and given tokens, their streams from `seeds`."""
        self.seq[rows], self.forced[rows] = -1, forced.to(self.forced.device)
        self.forced_run[rows] = forced_runs(self.forced[rows])
        self.n[rows], self.pending[rows], self.active[rows] = 0, -1, True
        self.streams.admit(rows, seeds)
        forced_at = (forced >= 0).any(0).nonzero()
        if len(forced_at):  # a row admitted at this step has n >= (steps since) from then on: see `forced_ahead`
            self.forced_until = max(self.forced_until, self.step + int(forced_at[-1]) + 1)
            self.any_forced = True
        for row, row_id in zip(rows.tolist(), row_ids):
            self.row_ids[row] = row_id

    def buffers(self) -> tuple[torch.Tensor, ...]:
        """What a step writes in place: the tokens, each row's committed length, last token and activity, and the
        counters of its random streams."""
        return self.seq, self.n, self.pending, self.active, *self.streams.counters()

    @property
    def batch_size(self) -> int:
        return self.seq.shape[0]

    @property
    def length(self) -> int:
        return self.layout.length

    def index(self, L: int, offset: int = 0) -> torch.Tensor:
        """[B, L] generated indices n+offset .. n+offset+L-1."""
        return self.n[:, None] + offset + torch.arange(L, device=self.n.device)

    def draft_tokens(self, L: int) -> torch.Tensor:
        """[B, L-1] tokens in the draft slots of a window of L (indices n .. n+L-2)."""
        return self.seq.gather(1, self.index(L - 1))

    def finish(self, row: int, length: int) -> None:
        """End `row` with its first `length` committed tokens (a stop string was found, say)."""
        if length > int(self.n[row]):
            raise ValueError(f"row {row} has only {int(self.n[row])} committed tokens, cannot keep {length}")
        self.n[row] = length
        self.active[row] = False

    def gumbel_max(self, logp: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """logp [B, W, V] at generated indices [B, W] -> [B, W] argmax(log p + g): plain AR's draw there, with each
        position's own noise row. Greedy p is one-hot, which no noise can move: the noise is not computed. Rows not
        running draw nothing where they can be left out (a lone request in an engine of many places): 0 there, which
        nothing commits."""
        if self.sampling.temperature == 0:
            return logp.argmax(-1)
        rows = self.streams.running()  # [b] or None
        if rows is None:
            return (logp + self.streams.gumbel(index).to(logp.device)).argmax(-1)
        y = torch.zeros(logp.shape[:-1], dtype=torch.long, device=logp.device)  # (index may broadcast over logp)
        y[rows] = (logp[rows] + self.streams.gumbel(index[rows], rows).to(logp.device)).argmax(-1)
        return y

    def forced_ahead(self) -> int:
        """How many indices from n on are forced in every active row: a window over them commits them all,
        whatever was drafted there, so one forward can take a given first frame or prefix."""
        if self.step >= self.forced_until:  # every step commits a token per active row, so n >= its steps: none ahead
            return 0
        run = self.forced_run.gather(1, self.n[:, None]).squeeze(1)  # [B]
        return int(run.masked_fill(~self.active, self.forced.shape[1]).min())

    def structural(self, index: torch.Tensor) -> torch.Tensor:
        """[B, W] indices -> [B, W] the token each row must have there (structural or given), or FREE."""
        return self.forced.gather(1, index.clamp(max=self.forced.shape[1] - 1))


def forced_runs(forced: torch.Tensor) -> torch.Tensor:
    """[B, M] forced tokens (FREE = -1 elsewhere) -> [B, M] how many indices from each one on are forced."""
    M = forced.shape[1]
    at = torch.arange(M, device=forced.device)
    free_at = torch.where(forced < 0, at, M)  # [B, M]
    next_free = free_at.flip(1).cummin(1).values.flip(1)  # the first free index at or after each one
    return next_free - at

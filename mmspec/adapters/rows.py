"""Rows that are done leave the batch: sessions whose forwards run only the rows still generating.

A batch's rows finish apart: a speculative window lets each row's committed prefix race ahead at its own pace (at a
fixed 8 on emoji-video's 8 mixed rows they take 90-152 forwards), and a row that is done would otherwise ride along to
the end, a full row of every forward. The loop owns one `Rows` per generation and says once a step which rows still
run (`follow`); every session narrowed to it (`narrow`: the target's, a draft model's; a draft head's cache follows it
too) drops the others then, in one place. Outside, the batch keeps its rows and their numbers: drafters, verifiers,
the state and hooks see all B, and a done row gets logits of zero (a uniform p) and features of zero, which nothing
commits (the loop commits no token to a row that is done). Rows only ever finish, so the rows run only shrink, and
each `follow` that drops some copies every narrowed cache once.
"""
from __future__ import annotations

import torch

from mmspec.adapters.base import Selects
from mmspec.sampling import Sampling
from mmspec.tree import Tree


class Rows:
    """The batch rows still generating, as the loop last read them: `rows` [B'] ascending (None: all of the batch)."""

    def __init__(self, batch_size: int, held: "torch.Tensor | None" = None):
        """held: [B'] the rows the sessions hold at first, ascending (None: all)."""
        self.batch_size = batch_size
        self.rows: torch.Tensor | None = held
        self.followers: list[Selects] = []  # what drops the rows that leave, each holding the rows run now
        self._run: dict[int, torch.Tensor] = {}  # copies -> [c * B'] the rows run in a batch held c times over

    def add(self, follower: Selects) -> None:
        """`follower.select(kept)` keeps only the rows at places `kept` [B'] of those it holds, when rows leave."""
        self.followers.append(follower)

    @property
    def all(self) -> bool:
        """Whether every row of the batch still runs."""
        return self.rows is None

    def follow(self, active: torch.Tensor, running: int, joined: bool = False) -> None:
        """active [B] bool: the rows generating, `running` of them (the loop's read of the device); the others leave
        every follower. Nothing to do while as many run as before, unless rows `joined` (mmspec.engine: a new request
        took the places of rows that had left): followers then hold a place for each, a copy of a neighbour's rows
        until the session `take`s the new rows into it."""
        held = self.batch_size if self.rows is None else len(self.rows)
        if running == held and not joined or running == self.batch_size and self.rows is None:
            return
        rows = active.nonzero().squeeze(1)  # [B']
        kept = rows if self.rows is None else torch.searchsorted(self.rows, rows).clamp(max=held - 1)  # their places
        for follower in self.followers:  # in what is held (a row that joined: the next row's, or the last)
            follower.select(kept)
        self.rows, self._run = (None if len(rows) == self.batch_size else rows), {}

    def places(self, rows: torch.Tensor) -> torch.Tensor:
        """[b] batch rows (held) -> [b] their places in what followers hold."""
        return rows if self.rows is None else torch.searchsorted(self.rows, rows)

    def narrow(self, session):
        """A session (that can drop rows) -> one whose forwards run the rows still generating; others as they are."""
        if self.batch_size > 1 and isinstance(session, Selects):
            return ActiveRows(session, self)
        return session

    def run(self, copies: int = 1) -> torch.Tensor | None:
        """[c * B'] the rows run among a batch held `copies` times over (CFG's null rows after); None: all."""
        if self.rows is None:
            return None
        if copies not in self._run:
            self._run[copies] = with_copies(self.rows, self.batch_size, copies)
        return self._run[copies]

    def tree(self, tree: Tree) -> Tree:
        """A tree for the whole batch -> for the rows run (a per-row tree's rows; a shared tree as it is)."""
        if self.rows is None or tree.visible.dim() == 2:
            return tree
        run = self.run(tree.visible.shape[0] // self.batch_size)
        offset = tree.offset[run] if tree.offset.dim() == 2 else tree.offset
        return Tree(offset, tree.visible[run], tree.chain, tree.depth)

    def whole(self, x: torch.Tensor | None) -> torch.Tensor | None:
        """[c * B', ...] of the rows run (CFG's null rows after the others) -> [c * B, ...], zeros for the rows that
        are done."""
        if x is None or self.rows is None:
            return x
        c = x.shape[0] // len(self.rows)
        return scatter_rows(x, self.run(c), c * self.batch_size)


class ActiveRows:
    """A session narrowed to the rows still generating (`Rows`): the whole batch outside, those rows inside."""

    def __init__(self, session, rows: Rows):
        self.inner, self.running = session, rows
        self.batch_size, self.vocab_size, self.device = rows.batch_size, session.vocab_size, session.device
        self.prompt, self.draft_vocab = session.prompt, session.draft_vocab
        rows.add(session)

    @property
    def rows(self) -> torch.Tensor | None:
        """[B'] the batch rows the inner session runs, ascending (None: all)."""
        return self.running.rows

    @property
    def taps(self) -> tuple[int, ...]:
        return self.inner.taps

    @taps.setter
    def taps(self, layers: tuple[int, ...]) -> None:  # a draft head asks the target for these layers' inputs
        self.inner.taps = layers

    @property
    def features(self) -> torch.Tensor | None:
        return self.running.whole(self.inner.features)

    def forward(self, tokens: torch.Tensor, start: torch.Tensor, tree: Tree | None = None):
        if self.rows is None:
            return self.inner.forward(tokens, start, tree)
        cond, null = self.forward_run(tokens, start, tree)
        return self.running.whole(cond), self.running.whole(null)

    def p(self, sampling: Sampling, tokens: torch.Tensor, start: torch.Tensor,
          tree: Tree | None = None) -> torch.Tensor:
        """log p [B, W, V] of a forward (`Sampling.logp`), sampled for the rows run alone: the others get what the zero
        logits of `forward` would give them, sampled once (a place no row runs would cost every step's CFG, top-k
        and softmax over [V])."""
        rows = self.rows
        if rows is None:
            return sampling.logp(*self.forward(tokens, start, tree))
        logits = self.forward_run(tokens, start, tree)
        logp = sampling.logp(*logits)  # [B', W, V]
        done = sampling.logp(*(None if x is None else x.new_zeros(1, *x.shape[1:]) for x in logits))  # [1, W, V]
        return done.expand(self.batch_size, *logp.shape[1:]).clone().index_copy_(0, rows, logp)

    def forward_run(self, tokens: torch.Tensor, start: torch.Tensor, tree: Tree | None):
        """The inner session's forward over the rows run: (cond [B', W, V], null or None)."""
        rows = self.rows
        tree = None if tree is None else self.running.tree(tree)  # (CFG's null rows are the inner session's)
        return self.inner.forward(tokens[rows], start[rows], tree)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.inner.embed(tokens)

    def adopt(self, nodes: torch.Tensor) -> None:
        self.inner.adopt(nodes if self.rows is None else nodes[self.rows])

    def takes(self, other, grow: int = 0) -> bool:
        return self.inner.takes(other, grow)

    def take(self, other, places: torch.Tensor) -> None:
        self.inner.take(other, self.running.places(places))

    def buffers(self) -> list[torch.Tensor]:
        return self.inner.buffers()


def with_copies(rows: torch.Tensor, batch: int, copies: int) -> torch.Tensor:
    """[B'] rows of a batch of `batch` -> [c * B'] their rows in a batch held `copies` times over (CFG's null rows
    after the others)."""
    return torch.cat([rows + i * batch for i in range(copies)])


def scatter_rows(x: torch.Tensor, rows: torch.Tensor, total: int) -> torch.Tensor:
    """[R', ...] values of `rows` [R'] -> [total, ...], zeros for the other rows."""
    return x.new_zeros(total, *x.shape[1:]).index_copy_(0, rows, x)


def sampled(session, sampling: Sampling, tokens: torch.Tensor, start: torch.Tensor,
            tree: Tree | None = None) -> torch.Tensor:
    """log p [B, W, V] of a session's forward over `tokens` [B, W]; a session narrowed to the rows running samples
    those alone (`ActiveRows.p`)."""
    if isinstance(session, ActiveRows):
        return session.p(sampling, tokens, start, tree)
    return sampling.logp(*session.forward(tokens, start, tree))

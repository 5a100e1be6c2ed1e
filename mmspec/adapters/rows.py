"""Rows that are done leave the batch: a session whose forwards run only the rows still generating.

A batch's rows finish apart: a speculative window lets each row's committed prefix race ahead at its own pace (at a
fixed 8 on emoji-video's 8 mixed rows they take 90-152 forwards), and a row that is done used to ride along to the
end, a full row of every forward. `ActiveRows` wraps a session that can drop rows (`select`) and, once the loop says
which rows still run (`follow`), hands it those rows only. Outside, the batch keeps its rows and their numbers:
drafters, verifiers, the state and hooks see all B, and a done row gets logits of zero (a uniform p) and features of
zero, which nothing commits (the loop commits no token to a row that is done). Rows only ever finish, so the rows run
only shrink, and each `follow` that drops some copies the cache once.
"""
from __future__ import annotations

import torch

from mmspec.tree import Tree


class ActiveRows:
    def __init__(self, session):
        self.inner = session
        self.batch_size, self.vocab_size, self.device = session.batch_size, session.vocab_size, session.device
        self.prompt, self.draft_vocab = session.prompt, session.draft_vocab
        self.rows: torch.Tensor | None = None  # [B'] the batch rows the inner session runs, ascending (None: all)

    @property
    def all_rows(self) -> bool:
        """Whether the inner session still runs every row of the batch."""
        return self.rows is None

    @property
    def taps(self) -> tuple[int, ...]:
        return self.inner.taps

    @taps.setter
    def taps(self, layers: tuple[int, ...]) -> None:  # a draft head asks the target for these layers' inputs
        self.inner.taps = layers

    @property
    def features(self) -> torch.Tensor | None:
        return self._whole(self.inner.features)

    def follow(self, active: torch.Tensor, running: int) -> None:
        """active [B] bool: the rows still generating, `running` of them (the caller's read of the device); the others
        leave the inner session for good. Nothing to do while as many run as before."""
        if running == (self.batch_size if self.rows is None else len(self.rows)):
            return
        rows = active.nonzero().squeeze(1)  # [B']
        kept = rows if self.rows is None else torch.searchsorted(self.rows, rows)  # their places in the inner batch
        self.inner.select(kept)
        self.rows = rows

    def forward(self, tokens: torch.Tensor, start: torch.Tensor, tree: Tree | None = None):
        rows = self.rows
        if rows is None:
            return self.inner.forward(tokens, start, tree)
        if tree is not None and tree.visible.dim() == 3:  # a per-row tree (CFG's null rows are the session's)
            offset = tree.offset[rows] if tree.offset.dim() == 2 else tree.offset
            tree = Tree(offset, tree.visible[rows], tree.chain, tree.depth)
        cond, null = self.inner.forward(tokens[rows], start[rows], tree)
        return self._whole(cond), self._whole(null)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.inner.embed(tokens)

    def adopt(self, nodes: torch.Tensor) -> None:
        self.inner.adopt(nodes if self.rows is None else nodes[self.rows])

    def buffers(self) -> list[torch.Tensor]:
        return self.inner.buffers()

    def _whole(self, x: torch.Tensor | None) -> torch.Tensor | None:
        """[c * B', ...] of the rows run (c = 2 with CFG's null rows after the others) -> [c * B, ...], zeros for the
        rows that are done."""
        if x is None or self.rows is None:
            return x
        c = x.shape[0] // len(self.rows)
        return scatter_rows(x, with_copies(self.rows, self.batch_size, c), c * self.batch_size)


def with_copies(rows: torch.Tensor, batch: int, copies: int) -> torch.Tensor:
    """[B'] rows of a batch of `batch` -> [c * B'] their rows in a batch held `copies` times over (CFG's null rows
    after the others)."""
    return torch.cat([rows + i * batch for i in range(copies)])


def scatter_rows(x: torch.Tensor, rows: torch.Tensor, total: int) -> torch.Tensor:
    """[R', ...] values of `rows` [R'] -> [total, ...], zeros for the other rows."""
    return x.new_zeros(total, *x.shape[1:]).index_copy_(0, rows, x)

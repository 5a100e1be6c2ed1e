"""Fill policies: choose tokens for fresh window slots by copying or at random (q is one-hot).

A fresh slot at index m takes the token at a reference index r(m) < m (left, above, previous frame,
or the continuation of a matching n-gram); when r(m) is itself fresh the chain is followed back.
The copied token is a function of what lies before m, so its law given that is one-hot: storing
q = one-hot(d) keeps verification exact.
"""
from __future__ import annotations

from typing import Protocol

import torch

from mmspec.state import DecodeState
from mmspec.steps import Context


class Fill(Protocol):
    """A fill may also set `evidence` after each call: [B] how many fresh slots of each row, from the first one,
    came from evidence (a match) rather than guesses; fills without it guess everywhere they write."""

    def start(self, state: DecodeState, context: Context) -> None:
        """Called once per generation, before the first fill."""

    def __call__(self, state: DecodeState, first: torch.Tensor, L: int) -> None:
        """Write state.seq at indices first[b] .. n[b]+L-2 of each row (the fresh draft slots of a window of L)."""


def _fresh_index(state: DecodeState, first: torch.Tensor, L: int):
    index = state.index(L - 1)  # [B, L-1]
    return index, index >= first[:, None]


def _write(state: DecodeState, index: torch.Tensor, fresh: torch.Tensor, tokens: torch.Tensor) -> None:
    old = state.seq.gather(1, index)
    state.seq.scatter_(1, index, torch.where(fresh, tokens, old))


class RandomFill:
    """Uniform random tokens (SJD / SCD default) over the target's draft vocabulary (all tokens, or e.g. visual
    ones); other fills guess with it where they have nothing to copy."""

    vocab: torch.Tensor | None = None  # [V'] the ids drawn from; None: all of the target's

    def start(self, state: DecodeState, context: Context) -> None:
        self.vocab = context.draft_vocab

    def tokens(self, state: DecodeState, count: int) -> torch.Tensor:
        """[B, count] uniform draws."""
        high = state.vocab_size if self.vocab is None else len(self.vocab)
        draws = state.streams.randint(high, count).to(state.seq.device)
        return draws if self.vocab is None else self.vocab[draws]

    def __call__(self, state: DecodeState, first: torch.Tensor, L: int) -> None:
        index, fresh = _fresh_index(state, first, L)
        _write(state, index, fresh, self.tokens(state, L - 1))


class CopyFill:
    """Copy a neighbour: 'left', 'above' (row above) or 'prev-frame' (same cell, previous frame).

    Where the layout has no such neighbour (first row, first frame) it falls back to the next
    nearer kind, and to a random token at index 0.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._ref: torch.Tensor | None = None
        self._random = RandomFill()

    def start(self, state: DecodeState, context: Context) -> None:
        self._random.start(state, context)

    def _table(self, state: DecodeState) -> torch.Tensor:
        if self._ref is None:
            layout, kinds = state.layout, ("left", "above", "prev-frame")
            ref = torch.full((layout.length,), -1)
            for kind in kinds[: kinds.index(self.kind) + 1]:  # the wanted kind wins where it exists
                if kind in layout.neighbour_kinds:
                    nb = layout.neighbour(kind)
                    ref = torch.where(nb >= 0, nb, ref)
            overhang = torch.arange(layout.length, layout.length + state.max_window) - 1  # past the end: left
            self._ref = torch.cat([ref, overhang]).to(state.seq.device)
        return self._ref

    def __call__(self, state: DecodeState, first: torch.Tensor, L: int) -> None:
        index, fresh = _fresh_index(state, first, L)  # [B, W]
        ref = self._table(state)[index]  # [B, W] each slot's reference, always an earlier index
        # follow references that land on other fresh slots back to known tokens by pointer jumping: a slot that
        # points at a fresh slot takes that slot's reference, so the path covered doubles each round and log2(W)
        # rounds reach the end of any chain inside the window, with no read of the device to decide when to stop
        for _ in range(max(L - 1, 1).bit_length()):
            again = fresh & (ref >= first[:, None])
            ref = torch.where(again, ref.gather(1, (ref - state.n[:, None]).clamp(0, L - 2)), ref)
        tokens = state.seq.gather(1, ref.clamp(min=0))
        _write(state, index, fresh, torch.where(ref >= 0, tokens, self._random.tokens(state, L - 1)))


class NGramFill:
    """Prompt lookup: find the earlier matches of the last n tokens (n = max_ngram .. 1) in the prompt and the
    tokens so far, and propose what followed the one with the longest continuation; unmatched slots copy the left
    token."""

    def __init__(self, max_ngram: int = 3):
        self.max_ngram = max_ngram
        self._left = CopyFill("left")
        self.evidence: torch.Tensor | None = None
        self.prompt: list[torch.Tensor] | None = None  # per row: the prompt's ids, looked up too

    def start(self, state: DecodeState, context: Context) -> None:
        self.prompt = context.prompt
        self._left.start(state, context)

    def __call__(self, state: DecodeState, first: torch.Tensor, L: int) -> None:
        index, fresh = _fresh_index(state, first, L)
        proposal = torch.full_like(index, -1)
        matched = []
        for b in range(state.batch_size):
            f = int(first[b])
            history = state.seq[b, :f]
            if self.prompt is not None:
                history = torch.cat([self.prompt[b], history])
            cont = _continuation(history, self.max_ngram, int(fresh[b].sum()))
            proposal[b, fresh[b].nonzero().squeeze(-1)[: len(cont)]] = cont
            matched.append(len(cont))
        self.evidence = torch.tensor(matched, device=index.device)
        _write(state, index, fresh & (proposal >= 0), proposal)
        unmatched = torch.where(fresh & (proposal < 0), index, torch.full_like(index, 1 << 62))
        self._left(state, unmatched.min(1).values, L)


def _continuation(history: torch.Tensor, max_ngram: int, count: int) -> torch.Tensor:
    for n in range(min(max_ngram, len(history) - 1), 0, -1):
        tail = history[-n:]
        windows = history[:-1].unfold(0, n, 1)  # every earlier n-gram that has a next token
        hits = (windows == tail).all(-1).nonzero().squeeze(-1)
        if len(hits):
            # the match with the longest continuation (up to count), the latest of those: the latest match alone
            # is often the text just written, whose continuation runs into the end of the history after a token
            # or two (code-text, greedy: 356 forwards against 274 over the bench's 8 prompts at a window of 16)
            start = hits + n  # [M] where each match's continuation begins
            room = (len(history) - start).clamp(max=count)
            start = int(start[room == room.max()][-1])
            return history[start:start + count]
    return history[:0]


class PoolFill:
    """Lookahead-style n-gram pool: what followed each token along the Jacobi trajectories so far (the windows'
    iterates, committed tokens included as they pass through), proposed after that token; unseen: random.

    The pool is a [B, V] table of the latest successor of each token per row, learned from the window's tokens
    before the fresh slots at every call, one pair at a time in window order (deterministic on any device).
    """

    def __init__(self):
        self.table: torch.Tensor | None = None  # [B, V] successor token, -1 = none seen yet
        self._random = RandomFill()

    def start(self, state: DecodeState, context: Context) -> None:
        self.table = torch.full((state.batch_size, state.vocab_size), -1, dtype=torch.long, device=state.seq.device)
        self._random.start(state, context)

    def __call__(self, state: DecodeState, first: torch.Tensor, L: int) -> None:
        seen_index = state.index(L, offset=-1)  # [B, L]: the last committed token, then the drafts
        seen = state.seq.gather(1, seen_index.clamp(min=0))
        for j in range(L - 1):  # learn pairs (x_j, x_j+1) that lie before the fresh slots
            a, b = seen[:, j], seen[:, j + 1]
            ok = (seen_index[:, j] >= 0) & (a >= 0) & (b >= 0) & (seen_index[:, j + 1] < first)
            at = a.clamp(min=0)[:, None]
            self.table.scatter_(1, at, torch.where(ok[:, None], b[:, None], self.table.gather(1, at)))
        index, fresh = _fresh_index(state, first, L)
        tokens, guesses = state.seq.gather(1, index), self._random.tokens(state, L - 1)
        prev, out = state.pending, []
        for j in range(L - 1):  # fresh slots chain: each follows the one before it
            known = self.table.gather(1, prev.clamp(min=0)[:, None])[:, 0]
            token = torch.where(fresh[:, j], torch.where(known >= 0, known, guesses[:, j]), tokens[:, j])
            out.append(token)
            prev = token
        if out:
            _write(state, index, fresh, torch.stack(out, 1))


FILLS = {
    "random": RandomFill,
    "left": lambda: CopyFill("left"),
    "above": lambda: CopyFill("above"),
    "prev-frame": lambda: CopyFill("prev-frame"),
    "ngram": NGramFill,
    "pool": PoolFill,
}


def make_fill(fill: "str | Fill") -> Fill:
    if not isinstance(fill, str):
        return fill
    if fill not in FILLS:
        raise ValueError(f"unknown fill policy {fill!r}; choose one of {sorted(FILLS)}")
    return FILLS[fill]()

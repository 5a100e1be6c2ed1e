"""Fill policies: choose tokens for fresh window slots by copying or at random (q is one-hot).

A fresh slot at index m takes the token at a reference index r(m) < m (left, above, previous frame,
or the continuation of a matching n-gram); when r(m) is itself fresh the chain is followed back.
The copied token is a function of what lies before m, so its law given that is one-hot: storing
q = one-hot(d) keeps verification exact.
"""
from __future__ import annotations

import bisect
from typing import Protocol, runtime_checkable

import torch

from mmspec.state import DecodeState
from mmspec.steps import Context


class Fill(Protocol):
    """Writes the fresh draft slots of a window; one that can tell matches from guesses is also a MatchingFill."""

    def start(self, state: DecodeState, context: Context) -> None:
        """Called once per generation, before the first fill."""

    def admit(self, state: DecodeState, rows: torch.Tensor, context: Context) -> None:
        """Rows `rows` [b] start a new request's rows (mmspec.engine); context: theirs (`prompt` of those rows)."""

    def __call__(self, state: DecodeState, first: torch.Tensor, L: int) -> None:
        """Write state.seq at indices first[b] .. n[b]+L-2 of each row (the fresh draft slots of a window of L)."""


@runtime_checkable
class MatchingFill(Fill, Protocol):
    """A fill that sets `evidence` after each call: [B] how many fresh slots of each row, from the first one, came
    from evidence (a match) rather than guesses (other fills guess everywhere they write)."""

    evidence: "torch.Tensor | None"


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

    def admit(self, state: DecodeState, rows: torch.Tensor, context: Context) -> None:
        pass  # (the draft vocabulary is the target's)

    def tokens(self, state: DecodeState, count: int) -> torch.Tensor:
        """[B, count] uniform draws."""
        high = state.vocab_size if self.vocab is None else len(self.vocab)
        draws = state.streams.randint(high, count).to(state.seq.device)
        return draws if self.vocab is None else self.vocab[draws]

    def __call__(self, state: DecodeState, first: torch.Tensor, L: int) -> None:
        index, fresh = _fresh_index(state, first, L)
        _write(state, index, fresh, self.tokens(state, L - 1))


def references(state: DecodeState, kind: str) -> torch.Tensor:
    """[N + max_window] each index's reference for a copy of kind 'left', 'above' or 'prev-frame' (the nearer kinds
    where the layout has no such neighbour; past the end: left), -1 where there is none (a random token)."""
    layout, kinds = state.layout, ("left", "above", "prev-frame")
    ref = torch.full((layout.length,), -1)
    for near in kinds[: kinds.index(kind) + 1]:  # the wanted kind wins where it exists
        if near in layout.neighbour_kinds:
            nb = layout.neighbour(near)
            ref = torch.where(nb >= 0, nb, ref)
    overhang = torch.arange(layout.length, layout.length + state.max_window) - 1
    return torch.cat([ref, overhang]).to(state.seq.device)


class CopyFill:
    """Copy a neighbour: 'left', 'above' (row above) or 'prev-frame' (same cell, previous frame).

    Where the layout has no such neighbour (first row, first frame) it falls back to the next
    nearer kind, and to a random token at index 0.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._ancestors: torch.Tensor | None = None
        self._shape: tuple | None = None  # (layout, max_window) the table was made for
        self._random = RandomFill()

    def start(self, state: DecodeState, context: Context) -> None:
        self._random.start(state, context)

    def admit(self, state: DecodeState, rows: torch.Tensor, context: Context) -> None:
        pass  # (references are the layout's)

    def _table(self, state: DecodeState) -> torch.Tensor:
        """[N + max_window, max_window - 1] each index's chain of references: its reference, that one's, ... (-1 past
        the first index without one). References fall, so the ones a window's fresh slots reach lie in a prefix."""
        if self._shape != (state.layout, state.max_window):  # (a fill given to several generations)
            self._shape = (state.layout, state.max_window)
            ref = references(state, self.kind)
            chain = [ref]
            for _ in range(state.max_window - 2):  # a chain within a window is shorter than it
                prev = chain[-1]
                chain.append(torch.where(prev >= 0, ref[prev.clamp(min=0)], prev))
            self._ancestors = torch.stack(chain, 1)
        return self._ancestors

    def __call__(self, state: DecodeState, first: torch.Tensor, L: int) -> None:
        index, fresh = _fresh_index(state, first, L)  # [B, W]
        # each slot copies the first index of its chain of references before the fresh slots (a known token, or -1:
        # a random one): the references are static, so that index is the chain's d-th, d being how many of it are
        # fresh, in four ops whatever the window (following the chain by pointer jumping took 6 ops a round, log2(W)
        # rounds: 36 ops of an emoji-video step at 64)
        chains = self._table(state)[:, : max(L - 1, 1)][index]  # [B, W, W] the references of each slot, in order
        fresh_refs = (chains >= first[:, None, None]).sum(-1, keepdim=True)  # [B, W, 1]
        ref = chains.gather(2, fresh_refs.clamp(max=chains.shape[2] - 1))[..., 0]  # [B, W]
        tokens = state.seq.gather(1, ref.clamp(min=0))
        _write(state, index, fresh, torch.where(ref >= 0, tokens, self._random.tokens(state, L - 1)))


class NGramFill:
    """Prompt lookup: find the earlier matches of the last n tokens (n = max_ngram .. 1) in the prompt and the
    tokens so far, and propose what followed the one with the longest continuation; unmatched slots copy the left
    token.

    Each row's history (its prompt, then its committed tokens, which never change) is indexed as it grows: every
    n-gram that has a next token, by its tokens, with the places it starts (`_History`). A call reads the tokens
    committed since the last one and the fresh slots' neighbours, once for the batch, and looks the matches up in
    Python. (As torch ops over the whole history, an unfold and a comparison per n and row and the left copies'
    pointer jumping, a call took 1.1 ms of a 9-10 ms code-text step at one row on a CPU.)"""

    def __init__(self, max_ngram: int = 3):
        self.max_ngram = max_ngram
        self._random = RandomFill()  # where a slot has no left neighbour
        self.evidence: torch.Tensor | None = None
        self.prompt: list[torch.Tensor] | None = None  # per row: the prompt's ids, looked up too
        self._rows: list[_History] = []
        self._refs: list[int] = []  # each index's left neighbour (-1: none: a random token)

    def start(self, state: DecodeState, context: Context) -> None:
        self.prompt = context.prompt
        self._random.start(state, context)
        self._rows = [_History(self.max_ngram, [] if self.prompt is None else self.prompt[b].tolist())
                      for b in range(state.batch_size)]
        self._refs = references(state, "left").tolist()

    def admit(self, state: DecodeState, rows: torch.Tensor, context: Context) -> None:
        for i, row in enumerate(rows.tolist()):
            prompt = [] if context.prompt is None else context.prompt[i].tolist()
            self._rows[row] = _History(self.max_ngram, prompt)

    def __call__(self, state: DecodeState, first: torch.Tensor, L: int) -> None:
        index = state.index(L - 1)  # [B, L-1]
        firsts, ns = torch.stack([first, state.n]).tolist()
        lo = min(min(h.committed for h in self._rows), min(ns))
        window = state.seq[:, lo: max(ns) + L - 1].tolist()  # [B][...] from index lo: all this call reads
        guesses = self._random.tokens(state, L - 1).tolist()  # (drawn in every call: each row's stream moves
        # on by the same count, whatever the others need)
        tokens, matched = [], []
        for b, (f, n, row) in enumerate(zip(firsts, ns, window)):
            history = self._rows[b]
            history.commit(row[history.committed - lo: n - lo], n)
            f = max(f, n)
            ahead = row[n - lo: f - lo]  # drafts before the fresh slots: in the history, not in the index
            fresh = max(n + L - 1 - f, 0)
            cont = history.continuation(ahead, fresh)
            matched.append(len(cont))
            out = ahead + cont
            u = f + len(cont)  # the first unmatched slot
            ends = {}  # slot m >= u -> where its chain of left neighbours leaves the unmatched slots
            for m in range(u, n + L - 1):  # copies of the left neighbour, followed back to a known token or a guess
                r = self._refs[m]
                r = ends[r] if r >= u else r
                ends[m] = r
                out.append(cont[r - f] if r >= f else row[r - lo] if r >= lo else history.token(r) if r >= 0
                           else guesses[b][m - n])
            tokens.append(out)
        self.evidence = torch.tensor(matched, device=index.device)
        state.seq.scatter_(1, index, torch.tensor(tokens, dtype=state.seq.dtype, device=index.device))


class _History:
    """One row's prompt and committed tokens, with every n-gram (n <= max_ngram) that has a next token indexed by its
    tokens: the places it starts, in order."""

    def __init__(self, max_ngram: int, prompt: list[int]):
        self.max_ngram, self.prompt = max_ngram, len(prompt)
        self.tokens: list[int] = []
        self.starts: dict[tuple[int, ...], list[int]] = {}
        self._extend(prompt)

    @property
    def committed(self) -> int:
        """Generated indices held (the history holds the prompt before them)."""
        return len(self.tokens) - self.prompt

    def token(self, index: int) -> int:
        return self.tokens[self.prompt + index]

    def commit(self, tokens: list[int], n: int) -> None:
        """The row's committed tokens now number n, ending with `tokens`; a row cut short (a stop) is indexed anew."""
        if n < self.committed:
            kept, self.tokens, self.starts = self.tokens[: self.prompt + n], [], {}
            self._extend(kept)
        else:
            self._extend(tokens)

    def _extend(self, new: list[int]) -> None:
        h, old = self.tokens, len(self.tokens)
        h.extend(new)
        for g in range(1, self.max_ngram + 1):  # n-grams whose next token has just arrived
            for i in range(max(old - g, 0), len(h) - g):
                self.starts.setdefault(tuple(h[i: i + g]), []).append(i)

    def continuation(self, ahead: list[int], count: int) -> list[int]:
        """What followed the best match of the last n tokens of the history plus `ahead` (n = max_ngram .. 1): up to
        `count` tokens, from the match with the most to copy, the latest of those."""
        h = self.tokens + ahead if ahead else self.tokens
        size = len(h)
        for g in range(min(self.max_ngram, size - 1), 0, -1):
            tail = h[size - g:]
            starts = list(self.starts.get(tuple(tail), ()))
            # n-grams that reach into `ahead` (not indexed: drafts change) and have a next token
            starts += [i for i in range(max(len(self.tokens) - g, 0), size - g) if h[i: i + g] == tail]
            if starts:
                # the match with the longest continuation (up to count), the latest of those: the latest match alone
                # is often the text just written, whose continuation runs into the end of the history after a token
                # or two (code-text, greedy: 356 forwards against 274 over the bench's 8 prompts at a window of 16).
                # Every match at least `count` before the end has all of it; otherwise the earliest has the most.
                full = bisect.bisect_right(starts, size - count - g)
                i = starts[full - 1] if full else starts[0]
                return h[i + g: i + g + count]
        return []


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

    def admit(self, state: DecodeState, rows: torch.Tensor, context: Context) -> None:
        self.table[rows] = -1

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

"""What the decode loop needs from a target (or draft) model.

A `Target` opens a `Session` for one generation: the condition is embedded and prefilled, the
session owns its KV cache, and with CFG it runs the null condition as a second half of the batch.
Generated tokens are addressed by their index in the layout; index -1 is the condition's last
element (a class embedding, the last prompt token...), which the session feeds itself.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from mmspec.cache import StaticKVCache
from mmspec.layouts import Layout
from mmspec.tree import Tree


class Session(Protocol):
    batch_size: int
    vocab_size: int
    device: torch.device
    prompt: list[torch.Tensor] | None  # per row: ids in the target vocabulary before generation, if any
    draft_vocab: torch.Tensor | None  # ids random drafts should come from (e.g. visual tokens only); None: all
    taps: tuple[int, ...]  # layers whose inputs each forward keeps in `features` (a draft head reads them)
    features: torch.Tensor | None  # [R, W, len(taps) * D] of the last forward, CFG's null rows after the others

    def forward(self, tokens: torch.Tensor, start: torch.Tensor,
                tree: "Tree | None" = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """tokens [B, L] at generated indices start[b] .. start[b]+L-1 -> logits for the next index of
        each: (cond [B, L, V], null-condition [B, L, V] or None without CFG). The cache keeps what lies
        before `start`; everything from `start` on is (re)written, so a rejection is a pointer move.
        With a `tree` (mmspec.tree), tokens [B, W] are its nodes: node w at index start + tree.offset[w],
        attending to the nodes tree.visible[w] (the tree may differ from row to row)."""
        ...

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token ids [R, T] -> the target's input embeddings [R, T, D] (a draft head without its own reads them)."""
        ...

    def adopt(self, nodes: torch.Tensor) -> None:
        """After a tree forward: the nodes [B, D] of the path the verifier took now stand for indices
        start+1 .. start+D (their keys and values move there)."""
        ...

    def buffers(self) -> list[torch.Tensor]:
        """The tensors its forwards write in place (the KV cache), the same ones all generation long."""
        ...


@runtime_checkable
class Selects(Protocol):
    """What a session may offer beyond `Session`: its rows can leave. `select(rows)` keeps only the batch rows `rows`
    [B'] (and their CFG null rows), in that order (PrefixSession has it; the loop's mmspec.adapters.rows.Rows calls it)."""

    def select(self, rows: torch.Tensor) -> None:
        ...


@runtime_checkable
class Takes(Protocol):
    """What a session may offer beyond `Session`: rows that finished take a new request's rows (mmspec.engine).
    `takes(other, grow)`: whether `other`, a session of the same target, layout and window on other conditions, fits,
    where `grow` is the bytes this session may allocate to make itself room for it (new cache tensors; 0: none, where
    a compiled step holds the old ones); `take(other, places)`: the batch rows `places` [b] become other's b rows
    (their prefill, CFG's null rows too)."""

    def takes(self, other, grow: int = 0) -> bool:
        ...

    def take(self, other, places: torch.Tensor) -> None:
        ...


class Target(Protocol):
    vocab_size: int

    def session(self, condition: Any, layout: Layout, *, cfg: bool, num_samples: int,
                max_window: int) -> Session:
        ...


def repeat_condition(condition: torch.Tensor, num_samples: int) -> torch.Tensor:
    """[C, ...] conditions -> [C * num_samples, ...]: row i is sample i % num_samples of condition i // num_samples."""
    return condition.repeat_interleave(num_samples, dim=0)


def window_index(start: torch.Tensor, W: int) -> torch.Tensor:
    """[B] start indices -> [B, W] generated indices of a forward's W nodes."""
    return start[:, None] + torch.arange(W, device=start.device)


class PrefixSession:
    """A session over a (left-padded) prefix of embeddings, with CFG as a second half of the batch.

    Slots: row r's prefix fills slots pad[r] .. P-1 (P = padded length), generated index i sits at
    slot P + i, so the prefix has the negative indices -P .. -1 and its last element is index -1.
    Subclasses give `embed(tokens [R, T]) -> [R, T, D]` and `logits(h [R, T, D], positions [R, T],
    view: CacheView of slots [R, T]) -> [R, T, V]`, and may override `positions(index [R, T]) -> [R, T]`, whatever the
    model reads its positions from (default: 1D position ids, 0 .. len[r]-1 over the prefix, then
    len[r] + i).
    """

    prompt: list[torch.Tensor] | None = None
    draft_vocab: torch.Tensor | None = None
    taps: tuple[int, ...] = ()
    features: torch.Tensor | None = None

    def __init__(self, prefix: torch.Tensor, lengths: torch.Tensor | None, batch_size: int, cfg: bool,
                 cache: StaticKVCache, vocab_size: int):
        R, P, _ = prefix.shape  # [R, P, D], R = batch_size * (2 if cfg else 1)
        self.batch_size, self.cfg, self.vocab_size, self.device = batch_size, cfg, vocab_size, prefix.device
        self.prefix_len, self.cache = P, cache
        self.prefix_slots = torch.tensor(P, device=prefix.device)  # as a tensor: a compiled step is not specialised
        # on the prompt's length (each text prompt's would compile every L afresh)
        self.lengths = torch.full((R,), P, device=prefix.device) if lengths is None else lengths.to(prefix.device)
        self.cache.first = P - self.lengths  # pad slots are never attended to
        # index -1 is fed with the first window (a dense copy: a view's strides would be the prompt length's, and a
        # compiled step would specialise on them)
        self.start_embedding = prefix[:, -1].clone(memory_format=torch.contiguous_format)
        if P > 1:  # the prefix but its last element, at slots 0 .. P-2 (indices -P .. -2)
            slots = torch.arange(P - 1, device=self.device).expand(R, -1)
            with torch.no_grad():
                self.logits(prefix[:, :-1], self.positions(slots - P), self.cache.view(slots))
            self.cache.advance(slots)

    def positions(self, index: torch.Tensor) -> torch.Tensor:
        return (self.lengths[:, None] + index).clamp(min=0)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, start: torch.Tensor, tree: Tree | None = None):
        if self.cfg:
            tokens, start = tokens.repeat(2, 1), start.repeat(2)
        if tree is not None:
            tree = tree.rows(tokens.shape[0])  # a per-row tree, for CFG's null rows too
        chain = window_index(start, tokens.shape[1])  # [R, W]
        index = chain if tree is None else start[:, None] + tree.offset  # [R, W] generated index of each node
        slots = chain + self.prefix_slots  # [R, W] contiguous: everything from start on is rewritten
        self._nodes = tokens.shape[1]  # (a Python int: `adopt` finds the window's slots from the cache's lengths)
        view = self.cache.view(slots, None if tree is None else tree.visible)
        h = self.embed(tokens.clamp(min=0))
        if view.lowest is None or view.lowest < self.prefix_len:  # index -1 is in the window: the condition's last
            h = torch.where((index < 0)[..., None], self.start_embedding[:, None].to(h.dtype), h)
        logits = self.logits(h, self.positions(index), view)
        self.cache.advance(slots)
        return (logits[: self.batch_size], logits[self.batch_size:]) if self.cfg else (logits, None)

    def select(self, rows: torch.Tensor) -> None:
        """Keep only the batch rows `rows` [B'] (and their CFG null rows), in that order: rows that are done leave
        the cache and every later forward (mmspec.adapters.rows)."""
        if self.prompt is not None:
            self.prompt = [self.prompt[r] for r in rows.tolist()]
        R = torch.cat([rows, rows + self.batch_size]) if self.cfg else rows
        self.cache.select(R)
        self.lengths, self.start_embedding = self.lengths[R], self.start_embedding[R]
        self.batch_size, self.features = len(rows), None

    def takes(self, other, grow: int = 0) -> bool:
        """Whether `other` fits this session's rows: the same kind of session and CFG, a prefix no longer than this
        one's (it is left-padded to it), or longer where the cache it then needs fits in `grow` bytes (`take`), and
        whatever else a row holds of the same shape (`_takes`). (Of the same layout and window, its rows need the
        slots past the prefix that this session's rows have.)"""
        return (type(other) is type(self) and other.cfg == self.cfg and self._takes(other)
                and (other.prefix_len <= self.prefix_len or self.cache.nbytes(other.cache.max_len) <= grow))

    def take(self, other: "PrefixSession", places: torch.Tensor) -> None:
        """The batch rows `places` [b] become `other`'s b rows: its prefill, left-padded to this session's prefix
        (the padding is never attended to), its positions and prompt; what the rows held before is never read again
        (everything from the prefix's last slot on is rewritten before it is read). A longer prefix than this
        session's left-pads every row held to it first (their slots move, their positions stay), in a cache of as
        many slots as `other`'s (what its prefix, the layout and the window need)."""
        if other.prefix_len > self.prefix_len:
            self.cache.shift(other.prefix_len - self.prefix_len, other.cache.max_len)
            self.prefix_len = other.prefix_len
            self.prefix_slots.fill_(self.prefix_len)
        R = torch.cat([places, places + self.batch_size]) if self.cfg else places
        self.cache.take(other.cache, R, self.prefix_len - other.prefix_len)
        self.lengths[R], self.start_embedding[R] = other.lengths, other.start_embedding.to(self.start_embedding.dtype)
        if self.prompt is not None:
            for place, prompt in zip(places.tolist(), other.prompt):
                self.prompt[place] = prompt
        self._take(other, R)

    def _takes(self, other) -> bool:
        """Whether what a subclass keeps per row fits (see `takes`)."""
        return True

    def _take(self, other, rows: torch.Tensor) -> None:
        """Rows `rows` [b * (2 with CFG)] of what a subclass keeps per row become `other`'s (see `take`)."""

    def adopt(self, nodes: torch.Tensor) -> None:
        nodes = nodes.repeat(2 if self.cfg else 1, 1)
        first = (self.cache.lengths - self._nodes)[:, None]  # [R, 1] the slot of the window's first node
        self.cache.move(first + nodes, first + 1 + torch.arange(nodes.shape[1], device=nodes.device))

    def buffers(self) -> list[torch.Tensor]:
        return [*self.cache.k, *self.cache.v, self.cache.lengths]

    def embed(self, tokens):
        raise NotImplementedError

    def logits(self, h, positions, view):
        raise NotImplementedError

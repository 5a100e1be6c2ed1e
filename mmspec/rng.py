"""Per-row randomness as pure functions of (row seed, what is drawn), vectorised over the batch.

Each row of a batch draws only from its own seed, so row i of a batch run equals a batch-1 run with
the same seed. Every draw is a counter-based hash (SplitMix64's finaliser) of a key, not the state
of a sequential generator, so no per-row Python loop and no hidden cursor can misalign it:
- `gumbel(index)`: the Gumbel noise row g_i [V] of generated position i is a function of (seed, i)
  alone, whoever asks for it, in whatever window or step. Plain sampling draws
  x_i = argmax(log p_i + g_i), and so does `exact`, which is why `exact` reproduces `ar` token for
  token, and why any sequence of windows leaves it unchanged.
- `uniform` / `randint`: everything else (acceptance uniforms, residual draws, random draft tokens),
  from a per-row counter of draws made so far (the aux stream).
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import torch

_MASK64 = (1 << 64) - 1
MAX_SEED = 2 ** 63 - 1  # seeds are 64-bit patterns: a larger one would wrap onto a smaller one's noise
_NOISE_SALT = 0x3C6EF372FE94F82B  # separate the two streams of one seed
_AUX_SALT = 0x5DEECE66D
_GOLDEN = 0x9E3779B97F4A7C15  # SplitMix64's increment: spreads consecutive counters apart
MEMO_BYTES = 64 << 20  # noise rows a generation keeps on a CPU (per Streams)
_MEMO_CHUNK = 64  # positions hashed at once
_UNIFORM_BITS = 23  # (k + 0.5) / 2^23 needs 24 significant bits: exact in fp32, and never 0 or 1
_FEW_DRAWS = 64  # aux draws of a call up to which a CPU hashes them in Python (see Streams.uniform)


def _signed(x: int) -> int:
    """A 64-bit constant as the int64 with the same bits (torch integer arithmetic wraps mod 2^64)."""
    x &= _MASK64
    return x - (1 << 64) if x >> 63 else x


_M1, _M2, _GOLDEN_S = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB), _signed(_GOLDEN)


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's >> is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def mix(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64 finaliser on int64 tensors: a bijection of 64-bit patterns with full avalanche.
    (In place on a copy: noise rows are [B, L, V], and every eager op allocates.)"""
    x = x.clone()
    for shift, mult in ((30, _M1), (27, _M2), (31, None)):
        x.bitwise_xor_(_shr(x, shift))
        if mult is not None:
            x.mul_(mult)
    return x


def _mix_int(x: int) -> int:
    """`mix` of one unsigned 64-bit int, in Python."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _uniform(bits: torch.Tensor) -> torch.Tensor:
    """Hashed int64 -> fp32 uniform in (0, 1), from its top 23 bits."""
    return _shr(bits, 64 - _UNIFORM_BITS).float().add_(0.5).mul_(1.0 / (1 << _UNIFORM_BITS))


def row_keys(seeds: list[int], salt: int) -> torch.Tensor:
    """[B] seeds -> [B] int64 stream keys."""
    return mix(torch.tensor([_signed(int(s)) for s in seeds], dtype=torch.long) ^ _signed(salt))


class Streams:
    def __init__(self, seeds: list[int], vocab_size: int, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.vocab_size = vocab_size
        self._noise = row_keys(seeds, _NOISE_SALT).to(self.device)  # [B]
        self._aux = row_keys(seeds, _AUX_SALT).to(self.device)  # [B]
        self._drawn = torch.zeros(len(seeds), dtype=torch.long, device=self.device)  # [B] aux draws so far
        self._aux_keys = [key & _MASK64 for key in self._aux.tolist()]  # the same, as unsigned Python ints
        self._vocab = torch.arange(vocab_size, device=self.device) * _GOLDEN_S  # [V]
        self._memo = torch.empty(len(seeds), 0, vocab_size, device=self.device)  # [B, M, V] noise rows of 0..M-1
        self._remembered = 0  # how many of them are filled
        self._memo_first = torch.zeros(len(seeds), 1, dtype=torch.long, device=self.device)  # [B, 1] see _remember
        # [B] bool or None (every row): the rows whose noise rows are remembered as positions are reached (a
        # DecodeState's active rows: a place no row runs would cost every chunk's hashing; `admit` hashes a row's
        # remembered rows when one starts there). The others read zeros, which nothing they draw commits.
        self.live: "torch.Tensor | None" = None

    @property
    def batch_size(self) -> int:
        return self._noise.shape[0]

    def counters(self) -> tuple[torch.Tensor, ...]:
        """What a draw changes in place, at one address all generation long (a compiled step's CUDA graphs must not
        hand the next step a counter in the memory of their outputs, which the next replay overwrites)."""
        return (self._drawn,)

    def admit(self, rows: torch.Tensor, seeds: list[int]) -> None:
        """Rows `rows` [b] start over with `seeds` (mmspec.engine: a new request's rows in the places of rows that
        finished): their own streams from their first draw, as in a batch of their own."""
        noise, aux = row_keys(seeds, _NOISE_SALT).to(self.device), row_keys(seeds, _AUX_SALT).to(self.device)
        self._noise[rows], self._aux[rows], self._drawn[rows] = noise, aux, 0  # (in place: see `counters`)
        for row, key in zip(rows.tolist(), aux.tolist()):
            self._aux_keys[row] = key & _MASK64
        if self._remembered:  # their remembered noise rows, hashed anew
            self._memo[rows, :self._remembered] = self._hash(torch.arange(self._remembered, device=self.device).expand(
                len(seeds), -1), noise)

    @contextmanager
    def only(self, rows: torch.Tensor):
        """Draws made inside move the aux streams of rows `rows` [b] alone (a fill for rows that joined draws for every
        row: the others' streams stay where a run without the joiners has them)."""
        others = torch.ones_like(self._drawn, dtype=torch.bool)
        others[rows] = False
        drawn = self._drawn.clone()
        yield
        self._drawn.copy_(torch.where(others, drawn, self._drawn))  # (in place: see `counters`)

    def running(self) -> "torch.Tensor | None":
        """[b] the live rows where some are not and reading which is free (a CPU, not compiling), else None: draws
        for every row."""
        if self.live is None or self.device.type != "cpu" or torch.compiler.is_compiling() or bool(self.live.all()):
            return None
        return self.live.nonzero().squeeze(1)

    def gumbel(self, index: torch.Tensor, rows: "torch.Tensor | None" = None) -> torch.Tensor:
        """[B, W] generated positions -> [B, W, V] fp32 Gumbel(0, 1) noise rows, a function of (seed, position);
        with `rows` [b], index [b, W] holds those rows' positions alone -> [b, W, V].

        On a CPU the rows are hashed once per position, _MEMO_CHUNK positions at a time, and read back from
        memory after that (a Jacobi window asks for each position about L / (accepted + 1) times, and each row
        costs ~20 passes over [B, V] int64 to hash); a copy of the same values, while the rows fit in MEMO_BYTES.
        Elsewhere, and in a compiled step, they are hashed where asked for: reading which positions are asked would
        wait for the device."""
        index = index if index.device == self.device else index.to(self.device)
        if self.device.type == "cpu" and index.numel() and not torch.compiler.is_compiling():  # compiled: no reads
            lo, hi = torch.stack(torch.aminmax(index)).tolist()
            if lo >= 0 and self._remember(hi + 1):  # whole rows of [B * M, V]: a row copy each, no per-value index
                at = index + (self._memo_first if rows is None else self._memo_first[rows])  # [B, W]
                return self._memo.view(-1, self.vocab_size).index_select(0, at.flatten()).view(*index.shape, -1)
        return self._hash(index, None if rows is None else self._noise[rows])

    def _hash(self, index: torch.Tensor, noise: "torch.Tensor | None" = None) -> torch.Tensor:
        """[b, W] positions -> [b, W, V] noise rows, of every row (or of the rows whose keys are `noise` [b])."""
        noise = self._noise if noise is None else noise
        key = mix(noise[:, None] + mix(index) * _GOLDEN_S)  # [b, W]
        u = _uniform(mix(key[..., None] + self._vocab))  # [B, W, V]
        return u.log_().neg_().log_().neg_()  # -log(-log U) is Gumbel(0, 1)

    def _remember(self, positions: int) -> bool:
        """Make the noise rows of positions 0 .. positions-1 readable from memory; False if they would not fit."""
        have = self._remembered
        if positions <= have:
            return True
        B, V = self.batch_size, self.vocab_size
        need = max(positions, have + _MEMO_CHUNK)
        if need > self._memo.shape[1]:  # grow the storage geometrically: few copies over a generation
            room = max(need, 2 * self._memo.shape[1])
            if B * room * V * 4 > MEMO_BYTES:
                room = need
                if B * room * V * 4 > MEMO_BYTES:
                    return False
            grown = self._memo.new_zeros(B, room, V)
            grown[:, :have] = self._memo[:, :have]
            self._memo = grown
            self._memo_first = torch.arange(0, B * room, room, device=self.device)[:, None]  # [B, 1] row b's first
        positions = torch.arange(have, need, device=self.device)
        rows = None if self.live is None else self.live.nonzero().squeeze(1)  # [b]
        if rows is None or len(rows) == B:
            self._memo[:, have:need] = self._hash(positions.expand(B, -1))
        else:
            self._memo[rows, have:need] = self._hash(positions.expand(len(rows), -1), self._noise[rows])
        self._remembered = need
        return True

    def uniform(self, *shape: int) -> torch.Tensor:
        """[B, *shape] uniforms in (0, 1) from each row's aux stream; every row moves on by prod(shape) draws."""
        count = math.prod(shape)
        if self.device.type == "cpu" and self.batch_size * count <= _FEW_DRAWS and not torch.compiler.is_compiling():
            # a few draws (a step's acceptance tests at one row): the same hash in Python, about 1 us a draw, where
            # the ~20 torch ops of the general path take 130 us on a CPU whatever their size
            drawn = self._drawn.tolist()
            self._drawn += count  # (in place: see `counters`)
            scale, shift = 1.0 / (1 << _UNIFORM_BITS), 64 - _UNIFORM_BITS
            return torch.tensor([[((_mix_int((key + (start + j) * _GOLDEN) & _MASK64) >> shift) + 0.5) * scale
                                  for j in range(count)] for key, start in zip(self._aux_keys, drawn)],
                                dtype=torch.float32).view(self.batch_size, *shape)
        counter = self._drawn[:, None] + torch.arange(count, device=self.device)  # [B, count]
        self._drawn += count  # (in place: see `counters`)
        return _uniform(mix(self._aux[:, None] + counter * _GOLDEN_S)).view(self.batch_size, *shape)

    def randint(self, high: int, *shape: int) -> torch.Tensor:
        """[B, *shape] integers in [0, high) from each row's aux stream (uniform up to a relative 2^-23 * high)."""
        return (self.uniform(*shape) * high).long().clamp(max=high - 1)

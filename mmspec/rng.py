"""Per-row random streams.

Each row of a batch owns two generators seeded from its seed alone, so row i of a batch run equals
a batch-1 run with the same seed:
- `noise`: Gumbel rows g_i [V], produced strictly in position order and kept until the row moves
  past them. Plain sampling draws x_i = argmax(log p_i + g_i), and so does `exact`, which is why
  `exact` reproduces `ar` token for token.
- `aux`: everything else (acceptance uniforms, residual draws, random draft tokens).
"""
from __future__ import annotations

import torch

_AUX_SALT = 0x5DEECE66D  # separates the aux stream from the noise stream of the same seed


def _generator(seed: int, device: torch.device) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(int(seed) % (2**63))


class Streams:
    def __init__(self, seeds: list[int], vocab_size: int, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.vocab_size = vocab_size
        self._noise = [_generator(s, self.device) for s in seeds]
        self._aux = [_generator(s ^ _AUX_SALT, self.device) for s in seeds]
        self._rows = [torch.empty(0, vocab_size, device=self.device) for _ in seeds]  # kept Gumbel rows
        self._first = [0] * len(seeds)  # position of _rows[b][0]

    @property
    def batch_size(self) -> int:
        return len(self._noise)

    def gumbel(self, start: torch.Tensor, width: int, active: torch.Tensor | None = None) -> torch.Tensor:
        """Gumbel rows for positions start[b] .. start[b]+width-1 of each row -> [B, width, V] fp32.

        Rows before `start` are dropped for good: positions only ever move forward. Rows that are
        not `active` (done) get zeros and leave their stream untouched.
        """
        out = []
        for b, s in enumerate(start.tolist()):
            if active is not None and not active[b]:
                out.append(torch.zeros(width, self.vocab_size, device=self.device))
                continue
            if s < self._first[b]:
                raise RuntimeError(f"row {b} asked for noise at position {s}, already dropped")
            rows, first = self._rows[b], self._first[b]
            missing = s + width - (first + rows.shape[0])
            if missing > 0:  # extend in position order, also over positions nobody asked for
                e = torch.empty(missing, self.vocab_size, device=self.device).exponential_(generator=self._noise[b])
                rows = torch.cat([rows, -e.log_()])  # -log(Exp(1)) is Gumbel(0, 1)
            self._rows[b], self._first[b] = rows[s - first:], s
            rows = self._rows[b]
            out.append(rows[:width])
        return torch.stack(out)

    def uniform(self, *shape: int) -> torch.Tensor:
        """[B, *shape] uniforms in [0, 1) from each row's aux stream."""
        return torch.stack([torch.rand(shape, generator=g, device=self.device) for g in self._aux])

    def randint(self, high: int, *shape: int) -> torch.Tensor:
        """[B, *shape] integers in [0, high) from each row's aux stream."""
        return torch.stack([torch.randint(high, shape, generator=g, device=self.device) for g in self._aux])

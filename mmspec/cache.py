"""Static KV cache indexed by absolute position, with a length per row.

Keys and values of row b live at slots 0 .. lengths[b]-1. A forward writes its L new entries at
slots lengths[b] .. lengths[b]+L-1 and attends causally by slot, so whatever lies past a row's
length is never read before it is overwritten. Rejecting drafted tokens is therefore only a
pointer move (`truncate`), as in gpt-fast and vLLM.
"""
from __future__ import annotations

import torch


class StaticKVCache:
    def __init__(self, layers: int, batch: int, heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"):
        shape = (layers, batch, heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # [layers, B, H, S, D]
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)  # [B] valid slots
        self.first = torch.zeros(batch, dtype=torch.long, device=device)  # [B] slots before it are padding

    @property
    def max_len(self) -> int:
        return self.k.shape[3]

    def truncate(self, lengths: torch.Tensor) -> None:
        """Keep slots < lengths[b] of each row. Only moves back: slots past a length are not valid."""
        lengths = lengths.to(self.lengths)
        if (lengths > self.lengths).any() or (lengths < 0).any():
            raise ValueError(f"cannot truncate to {lengths.tolist()}: valid lengths are {self.lengths.tolist()}")
        self.lengths = lengths.clone()

    def slots(self, width: int) -> torch.Tensor:
        """[B, width] slots that the next `width` tokens of each row will occupy."""
        slots = self.lengths[:, None] + torch.arange(width, device=self.lengths.device)
        if int(slots.max()) >= self.max_len:
            raise ValueError(f"KV cache of {self.max_len} slots is full (asked for slot {int(slots.max())})")
        return slots

    def mask(self, slots: torch.Tensor) -> torch.Tensor:
        """Attention mask [B, 1, T, S'] for queries at `slots` [B, T]: first[b] <= key slot <= query slot.
        A padding query sees itself only, so it stays finite and never reaches a real query."""
        keys = torch.arange(int(slots.max()) + 1, device=slots.device)
        q = slots[..., None]
        return ((keys <= q) & ((keys >= self.first[:, None, None]) | (keys == q)))[:, None]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor):
        """Write k, v [B, H, T, D] at `slots` [B, T]; return all keys/values up to the last slot [B, H, S', D]."""
        index = slots[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])  # [B, H, T, D]
        self.k[layer].scatter_(2, index, k.to(self.k.dtype))
        self.v[layer].scatter_(2, index, v.to(self.v.dtype))
        end = int(slots.max()) + 1
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]

    def advance(self, slots: torch.Tensor) -> None:
        """After a forward wrote `slots` [B, T], every row is valid up to its last slot."""
        self.lengths = slots[:, -1] + 1

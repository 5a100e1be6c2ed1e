"""Static KV cache indexed by absolute position, with a length per row.

Keys and values of row b live at slots 0 .. lengths[b]-1. A forward writes its L new entries at
slots s[b] .. s[b]+L-1 for any s[b] <= lengths[b] and attends causally by slot, so whatever lies past
its slots is never read before it is overwritten. Rejecting drafted tokens is therefore only a
pointer move (the next forward starts where the rejection was), as in gpt-fast and vLLM.

A forward builds one `CacheView` of its slots (per-layer write and read views, or a scatter index;
the attention mask) that every layer shares. With `static=True` (accelerators, compiled forwards) every forward attends over all slots,
so shapes never change and nothing waits for the device; otherwise attention stops at the last
slot written, which is cheaper on a CPU, at the price of reading that slot's number once.
"""
from __future__ import annotations

import torch


SLOT_MULTIPLE = 64


def session_slots(needed: int) -> int:
    """The slots a generation's cache is given for `needed`: a multiple of SLOT_MULTIPLE, so that prompts of different
    lengths share a compiled step's graphs (its shapes include the cache's: a text prompt one token longer compiled
    every L afresh)."""
    return -(-needed // SLOT_MULTIPLE) * SLOT_MULTIPLE


class StaticKVCache:
    def __init__(self, layers: int, batch: int, heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu", static: bool | None = None):
        self.static = torch.device(device).type != "cpu" if static is None else static
        # a tensor of its own per layer, not views of one [layers, ...] tensor: a compiled step writes a graph input
        # in place only when it is no view of another (into a view, inductor copied every layer's whole cache twice
        # a step: at 8 rows of emoji-image 5.8 of a compiled AR step's 6.7 ms on a CPU)
        shape = (batch, heads, max_len, head_dim)
        self.k, self.v = ([torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
                          for _ in range(2))  # per layer [B, H, S, D]
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)  # [B] valid slots
        self.first = torch.zeros(batch, dtype=torch.long, device=device)  # [B] slots before it are padding
        self._views()

    def _views(self) -> None:
        # made once per k, v (only `select` reallocates them), so a forward's layers index Python tuples, not tensors:
        self.layers = (tuple(self.k), tuple(self.v))  # per layer [B, H, S, D]
        self.rows = tuple(tuple(kv.view(-1, kv.shape[3]) for kv in kvs) for kvs in self.layers)  # [B * H * S, D]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only the rows `rows` [B'] (in that order): a copy of their keys and values, once."""
        self.k, self.v = ([kv.index_select(0, rows) for kv in kvs] for kvs in (self.k, self.v))
        self.lengths, self.first = self.lengths[rows], self.first[rows]
        self._views()

    def take(self, other: "StaticKVCache", rows: torch.Tensor, shift: int) -> None:
        """Rows `rows` [b] take the keys, values, lengths and padding of `other`'s b rows, in order, each slot s of
        `other` at slot s + shift (a shorter prefix, left-padded: the slots before hold nothing anyone attends to).
        What lies past other's lengths is rewritten before it is read, as after a rejection."""
        S = int(other.lengths.max())  # the slots written
        if S + shift > self.max_len:
            raise ValueError(f"rows of {S} slots shifted by {shift} do not fit a cache of {self.max_len}")
        for mine, theirs in zip(self.k + self.v, other.k + other.v):
            mine[rows, :, shift:shift + S] = theirs[:, :, :S].to(mine.dtype)
        self.lengths[rows] = other.lengths + shift
        self.first[rows] = other.first + shift

    def shift(self, d: int, slots: int) -> None:
        """Every row's slots move `d` later, in a cache of `slots` slots: a longer prefix joins the rows, whose own
        prefixes are left-padded by `d` more slots, never attended to. A copy of the slots written, once; the keys
        and values are new tensors (as after `select`)."""
        B, H, _, D = self.k[0].shape
        written = int(self.lengths.max())
        if written + d > slots:
            raise ValueError(f"rows of {written} slots shifted by {d} do not fit a cache of {slots}")

        def moved(kv: torch.Tensor) -> torch.Tensor:
            grown = kv.new_zeros(B, H, slots, D)
            grown[:, :, d:d + written] = kv[:, :, :written]
            return grown

        self.k, self.v = ([moved(kv) for kv in kvs] for kvs in (self.k, self.v))
        self.lengths += d
        self.first += d
        self._views()

    def nbytes(self, slots: "int | None" = None) -> int:
        """Bytes of the keys and values, or of the same rows' at `slots` slots."""
        B, H, S, D = self.k[0].shape
        return len(self.k + self.v) * B * H * (slots or S) * D * self.k[0].element_size()

    @property
    def max_len(self) -> int:
        return self.k[0].shape[2]

    def slots(self, T: int) -> torch.Tensor:
        """[B, T] slots that the next T tokens of each row will occupy."""
        return self.lengths[:, None] + torch.arange(T, device=self.lengths.device)

    def view(self, slots: torch.Tensor, visible: torch.Tensor | None = None) -> "CacheView":
        """What every layer of one forward over `slots` [B, T] shares: consecutive slots per row, from at most
        the row's length (anything from there on is rewritten: a rejection is only a pointer move). `visible`
        [T, A] or per row [B, T, A]: which of the A slots that end with the forward's last each of them attends
        to (a tree of drafts; A = T: the forward's own), instead of the causal order."""
        return CacheView(self, slots, visible)

    def move(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy the keys/values at slots src [B, M] to slots dst [B, M] of each row (a verified tree branch
        takes the places of the chain it replaces)."""
        _, heads, _, dim = self.k[0].shape
        src, dst = (s[:, None, :, None].expand(-1, heads, -1, dim) for s in (src, dst))
        for kv in self.k + self.v:
            kv.scatter_(2, dst, kv.gather(2, src))

    def advance(self, slots: torch.Tensor) -> None:
        """After a forward wrote `slots` [B, T], every row is valid up to its last slot. In place: the lengths live at
        one address all generation long (a compiled step's CUDA graphs replay into the memory of their outputs, so a
        length kept as a new output would be overwritten by the next replay)."""
        self.lengths.copy_(slots[:, -1] + 1)


class CacheView:
    """One forward's window onto the cache: where its keys/values go and what each query may attend to.

    `lowest`: the lowest slot any row writes (read on a CPU with the rest; None in static mode), so a session
    knows without another read whether the window reaches back into its prefix."""

    def __init__(self, cache: StaticKVCache, slots: torch.Tensor, visible: torch.Tensor | None = None):
        self.cache = cache
        B, T = slots.shape
        self.nodes = T  # the forward's nodes (W of a step; a prefill's prompt)
        self._bias: dict[torch.dtype, torch.Tensor] = {}  # the mask as an additive bias, by dtype (see `bias`)
        self.start = None  # with every row writing the same slots start.., a slice copy replaces the scatter
        first = slots[:, 0]  # [B]
        if cache.static or torch.compiler.is_compiling():  # a compiled forward reads nothing from the device either
            # checked on the device: no wait for it (on a CPU the error is raised here and now)
            torch._assert_async(((slots[:, -1] < cache.max_len) & (first <= cache.lengths) & (first >= 0)).all(),
                                f"KV cache of {cache.max_len} slots is full, or a forward skips slots")
            end, self.lowest = cache.max_len, None
            padded = True  # unknown without a host read, which an accelerator's forward does not make: keep the mask
        else:  # the one read of the forward: where attention stops, whether the rows are in step, and the checks
            lo, hi, pad, ok = torch.stack([first.min(), first.max(), cache.first.max(),
                                           (first <= cache.lengths).all()]).tolist()
            end = hi + T
            if end > cache.max_len:
                raise ValueError(f"KV cache of {cache.max_len} slots is full (asked for slot {end - 1})")
            if not ok or lo < 0:
                raise ValueError("a forward must start at or before each row's length: slots are never skipped")
            self.start = lo if lo == hi else None
            self.lowest = lo
            padded = pad > 0
        self.end = end
        if self.start is not None:  # [B, H, T, D] per layer, and what attention reads [B, H, end, D]
            self.write = [[kv.narrow(2, self.start, T) for kv in kvs] for kvs in cache.layers]
        else:  # rows out of step: each (row, head, query) writes one row of D values into the layer
            # viewed as [B * H * S, D]; an index_copy_ over these rows is 2x faster than a scatter_ of every value
            _, H, S, _ = cache.k[0].shape
            rows = torch.arange(B, device=slots.device)[:, None, None] * H + torch.arange(H, device=slots.device)[:, None]
            self.rows = (rows * S + slots[:, None, :]).flatten()  # [B * H * T]
        self.read = cache.layers if end == cache.max_len else [[kv.narrow(2, 0, end) for kv in kvs]
                                                               for kvs in cache.layers]
        if self.start is not None and T == 1 and not padded and visible is None:
            self.mask = None  # one query per row at the last slot, no padding: it sees every slot (and SDPA is faster)
            return
        # [B, 1, T, S]: first[b] <= key slot <= query slot. A padding query sees itself only, so it stays
        # finite and never reaches a real query.
        keys = torch.arange(end, device=slots.device)
        q = slots[..., None]
        if visible is None:
            seen = keys <= q
        else:  # the slots are contiguous: key slot s is the a-th of the A slots ending with the forward's last,
            # a = s - (slots[b, 0] + T - A), if in range (A = T: the forward's own nodes)
            A = visible.shape[-1]
            node = keys - (slots[:, :1, None] + T - A)  # [B, 1, S]
            own = visible.expand(B, T, A).gather(2, node.clamp(0, A - 1).expand(B, T, end))  # [B, T, S]
            seen = (node < 0) | (own & (node < A))
        if padded:
            seen = seen & ((keys >= cache.first[:, None, None]) | (keys == q))
        self.mask = seen[:, None]

    def bias(self, dtype: torch.dtype) -> "torch.Tensor | None":
        """The mask as SDPA's additive bias in the queries' dtype (0 seen, -inf not), made once per forward and
        dtype: given the boolean mask, SDPA makes this bias anew in every layer (10-20% of its time at one query
        per row on a CPU; the same outputs). None where the view has no mask."""
        if self.mask is None:
            return None
        if dtype not in self._bias:
            self._bias[dtype] = torch.zeros(self.mask.shape, dtype=dtype, device=self.mask.device).masked_fill_(
                ~self.mask, float("-inf"))
        return self._bias[dtype]

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v [B, H, T, D] at the view's slots; return the keys/values it attends over [B, H, S, D]."""
        if self.start is not None:
            self.write[0][layer].copy_(k)
            self.write[1][layer].copy_(v)
        else:
            D = k.shape[3]
            if torch.compiler.is_compiling():  # the views made here: a compiled step given views made outside (inputs
                # aliasing the cache) wrote into copies of the layer's whole cache, twice a step
                rows_k, rows_v = (kvs[layer].view(-1, D) for kvs in self.cache.layers)
            else:
                rows_k, rows_v = (rows[layer] for rows in self.cache.rows)
            rows_k.index_copy_(0, self.rows, k.reshape(-1, D).to(rows_k.dtype))
            rows_v.index_copy_(0, self.rows, v.reshape(-1, D).to(rows_v.dtype))
        return self.read[0][layer], self.read[1][layer]

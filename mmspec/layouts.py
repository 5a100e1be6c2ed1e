"""Token layouts: where each generated token sits (1D text, 2D image grid, 3D video grid).

A layout tells the decode loop how many tokens to generate, which position ids the model needs
for each of them, which tokens are structural (forced by the layout, e.g. Emu3's row-end token),
and which earlier token is a token's neighbour (left, above, previous frame) for draft copying.
Tokens are generated in raster order: frame by frame, row by row.
"""
from __future__ import annotations

import torch

FREE = -1  # marks a position whose token the model chooses (not structural)


class Layout:
    """Base class: subclasses fill `_positions` [N, axes], `_forced` [N] and `_strides`."""

    axes: int
    default_lookup: str
    # what fills the slots entering a Jacobi window unless a method says otherwise: on video, the same cell of
    # the previous frame (emoji-video, exact, window 64: 9.7x fewer forwards than ar, against 8.5x with random)
    default_init: str = "random"

    def __init__(self, positions: torch.Tensor, forced: torch.Tensor, strides: dict[str, int]):
        self._positions = positions  # [N, axes]
        self._forced = forced  # [N] token id or FREE
        self._strides = strides  # neighbour name -> index distance

    @property
    def length(self) -> int:
        return self._positions.shape[0]

    def __len__(self) -> int:
        return self.length

    def positions(self) -> torch.Tensor:
        """Position ids of every generated token: [N, axes] (1D index, (row, col) or (frame, row, col))."""
        return self._positions.clone()

    def forced(self) -> torch.Tensor:
        """[N] structural token at each position, or FREE (-1) where the model chooses."""
        return self._forced.clone()

    @property
    def neighbour_kinds(self) -> tuple[str, ...]:
        return tuple(self._strides)

    def neighbour(self, kind: str) -> torch.Tensor:
        """[N] index of the `kind` neighbour of each token, or -1 where it has none."""
        if kind not in self._strides:
            raise ValueError(f"{type(self).__name__} has no '{kind}' neighbour; it has {sorted(self._strides)}")
        idx = torch.arange(self.length)
        ref = idx - self._strides[kind]
        return torch.where(self._same_block(idx, ref, kind), ref, torch.full_like(ref, -1))

    def _same_block(self, idx: torch.Tensor, ref: torch.Tensor, kind: str) -> torch.Tensor:
        return ref >= 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v}' for k, v in self._args().items())})"

    def _args(self) -> dict:
        raise NotImplementedError


def _check_sizes(**sizes: int) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:  # (True is an int to Python)
            raise ValueError(f"layout size {name} must be a positive int, got {value!r}")


class Sequence1D(Layout):
    """n tokens in a line (text)."""

    axes = 1
    default_lookup = "ngram"

    def __init__(self, n: int):
        _check_sizes(n=n)
        self.n = n
        super().__init__(torch.arange(n)[:, None], torch.full((n,), FREE), {"left": 1})

    def _args(self) -> dict:
        return {"n": self.n}


def _grid(t: int, h: int, w: int, row_end: int | None, frame_end: int | None):
    """Raster grid of t frames of h rows of w cells, with optional end-of-row / end-of-frame tokens."""
    row_len = w + (row_end is not None)
    frame_len = h * row_len + (frame_end is not None)
    f, r, c = torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(row_len), indexing="ij")
    cells = torch.stack([f, r, c], -1).reshape(t, h * row_len, 3)
    forced = torch.full((t, h, row_len), FREE)
    if row_end is not None:
        forced[:, :, w] = row_end
    forced = forced.reshape(t, h * row_len)
    if frame_end is not None:  # the frame-end token sits after the last row, at (frame, h, 0)
        end = torch.stack([torch.arange(t), torch.full((t,), h), torch.zeros(t, dtype=torch.long)], -1)
        cells = torch.cat([cells, end[:, None]], 1)
        forced = torch.cat([forced, torch.full((t, 1), frame_end)], 1)
    return cells.reshape(-1, 3), forced.reshape(-1), row_len, frame_len


class Grid2D(Layout):
    """An h x w image grid in raster order. `row_end_token` adds a structural token after each row and
    `end_tokens` structural tokens after the grid (Emu3: end-of-line, then end-of-frame, image and text),
    placed at (h, 0), (h, 1)..."""

    axes = 2
    default_lookup = "above"

    def __init__(self, h: int, w: int, row_end_token: int | None = None, end_tokens: tuple[int, ...] = ()):
        _check_sizes(h=h, w=w)
        self.h, self.w, self.row_end_token, self.end_tokens = h, w, row_end_token, tuple(end_tokens)
        cells, forced, row_len, _ = _grid(1, h, w, row_end_token, None)
        tail = torch.stack([torch.full((len(end_tokens),), h), torch.arange(len(end_tokens))], -1)
        super().__init__(torch.cat([cells[:, 1:], tail]), torch.cat([forced, torch.tensor(self.end_tokens, dtype=torch.long)]),
                         {"left": 1, "above": row_len})

    def _args(self) -> dict:
        return {"h": self.h, "w": self.w, "row_end_token": self.row_end_token, "end_tokens": self.end_tokens}


class Grid3D(Layout):
    """t frames of h x w tokens, frame by frame in raster order; optional row-end / frame-end tokens."""

    axes = 3
    default_lookup = "prev-frame"
    default_init = "prev-frame"

    def __init__(self, t: int, h: int, w: int, row_end_token: int | None = None, frame_end_token: int | None = None):
        _check_sizes(t=t, h=h, w=w)
        self.t, self.h, self.w = t, h, w
        self.row_end_token, self.frame_end_token = row_end_token, frame_end_token
        cells, forced, row_len, frame_len = _grid(t, h, w, row_end_token, frame_end_token)
        self._frame_len = frame_len
        super().__init__(cells, forced, {"left": 1, "above": row_len, "prev-frame": frame_len})

    def _same_block(self, idx, ref, kind):
        # "above" stays inside a frame: the first row of a frame has no token above it
        same = (idx // self._frame_len) == (ref.clamp(min=0) // self._frame_len)
        return (ref >= 0) & (same | (kind != "above"))

    def _args(self) -> dict:
        return {"t": self.t, "h": self.h, "w": self.w, "row_end_token": self.row_end_token,
                "frame_end_token": self.frame_end_token}

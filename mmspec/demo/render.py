"""Pictures of a run, without gradio: partial grids, the commit map and the accepted-length histogram."""
from __future__ import annotations

import numpy as np
import torch
from PIL import Image

GREY = 200  # not yet committed


def enlarge(image: Image.Image, side: int) -> Image.Image:
    """Small model outputs scaled up to about `side` pixels by whole pixels, not blurred by the browser."""
    scale = max(1, side // max(image.size))
    return image.resize((image.width * scale, image.height * scale), Image.NEAREST)


def grey_out(images: list, committed: torch.Tensor) -> list:
    """Paint grey the pixels of tokens not committed yet; committed [M, h, w] bool, one grid per image."""
    out = []
    for image, mask in zip(images, committed.cpu().numpy()):
        arr = np.array(image)
        sy, sx = arr.shape[0] // mask.shape[0], arr.shape[1] // mask.shape[1]  # pixels per token
        arr[~mask.repeat(sy, 0).repeat(sx, 1)] = GREY
        out.append(Image.fromarray(arr))
    return out


def filmstrip(frames: list) -> Image.Image:
    """Frames side by side, so a partial video shows which frames are being filled in."""
    return Image.fromarray(np.concatenate([np.asarray(f) for f in frames], axis=1))


def stack(images: list) -> Image.Image:
    """Images of one width, one below the other, 4 pixels of white between them."""
    gap = np.full((4, images[0].width, 3), 255, dtype=np.uint8)
    rows = [part for image in images for part in (np.asarray(image), gap)][:-1]
    return Image.fromarray(np.concatenate(rows, axis=0))


def accepted_lengths(commit_step: torch.Tensor) -> torch.Tensor:
    """[B, N] forward that committed each token (-1: never) -> tokens committed by each (row, forward)."""
    counts = [torch.bincount(row[row >= 0]) for row in commit_step.cpu()]
    return torch.cat([c[c > 0] for c in counts]) if counts else torch.zeros(0, dtype=torch.long)


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")  # no pyplot: thread safe
    FigureCanvasAgg(fig)
    return fig


def _image(fig) -> Image.Image:
    fig.canvas.draw()
    return Image.fromarray(np.asarray(fig.canvas.buffer_rgba())).convert("RGB")


def run_edges(steps: np.ndarray) -> list:
    """steps [H, W] -> line segments (in imshow's cell coordinates) between neighbouring tokens that
    different forwards committed: they outline the runs that one forward accepted at once."""
    ys, xs = np.nonzero(steps[:, 1:] != steps[:, :-1])
    segments = [[(x + 0.5, y - 0.5), (x + 0.5, y + 0.5)] for y, x in zip(ys, xs)]
    ys, xs = np.nonzero(steps[1:] != steps[:-1])
    return segments + [[(x - 0.5, y + 0.5), (x + 0.5, y + 0.5)] for y, x in zip(ys, xs)]


def commit_map(steps: np.ndarray) -> Image.Image:
    """steps [B, T, H, W]: the forward that committed each token (-1: never). One panel per output and
    frame (video: outputs in rows, frames in columns) on one colour scale; white lines outline the
    runs of tokens that one forward committed. The panels are one picture in one axes: a grid of axes costs
    ~40 ms a panel to lay out (0.6 s for a video of 2 x 8 frames), one ~0.1 s in all."""
    from matplotlib import colormaps
    from matplotlib.collections import LineCollection

    B, T, H, W = steps.shape
    video = T > 1
    rows, cols = (B, T) if video else (1, B)
    panels = steps.reshape(rows, cols, H, W)
    canvas = np.full((rows * (H + 1) - 1, cols * (W + 1) - 1), -2)  # panels one cell apart; -2: the gaps
    edges = []
    for r in range(rows):
        for c in range(cols):
            y, x = r * (H + 1), c * (W + 1)
            canvas[y:y + H, x:x + W] = panels[r, c]
            edges += [[(px + x, py + y) for px, py in segment] for segment in run_edges(panels[r, c])]
    side = 1.4 if video else 2.0  # inches per panel
    fig = _figure(side * cols + 1.6, max(side * rows * H / W, 1.6) + 0.6)
    ax = fig.subplots()
    cmap = colormaps["viridis"].with_extremes(bad="lightgrey", under="white")  # never committed; the gaps
    shown = ax.imshow(np.ma.masked_equal(canvas, -1), cmap=cmap, vmin=0, vmax=max(int(steps.max()), 1),
                      interpolation="nearest")
    ax.add_collection(LineCollection(edges, colors="white", linewidths=0.5))
    ax.spines[:].set_visible(False)
    ax.tick_params(length=0, labelsize=8)
    columns, lines = np.arange(cols) * (W + 1) + (W - 1) / 2, np.arange(rows) * (H + 1) + (H - 1) / 2
    if video:
        ax.xaxis.tick_top()
        ax.set_xticks(columns, [f"frame {t}" for t in range(T)])
        ax.set_yticks(lines, [f"output {b}" for b in range(B)], rotation=90, va="center")
    else:
        ax.set_xticks(columns, [f"output {b}" for b in range(B)] if B > 1 else [""])
        ax.set_yticks([])
    fig.colorbar(shown, ax=ax, label="committed at forward", shrink=0.9)
    return _image(fig)


def length_histogram(commit_step: torch.Tensor) -> Image.Image:
    """How many forwards committed 1, 2, 3... tokens (per row; AR commits exactly 1 per forward)."""
    lengths = accepted_lengths(commit_step)
    counts = torch.bincount(lengths, minlength=2)[1:].tolist()
    fig = _figure(5, 2.6)
    ax = fig.subplots()
    ax.bar(range(1, len(counts) + 1), counts, color="#3b75af")
    ax.set_xlabel("tokens committed by one forward")
    ax.set_ylabel("forwards")
    mean = lengths.float().mean().item() if len(lengths) else 0.0
    ax.text(0.98, 0.95, f"mean {mean:.2f}", transform=ax.transAxes, ha="right", va="top")
    ax.xaxis.get_major_locator().set_params(integer=True)
    return _image(fig)

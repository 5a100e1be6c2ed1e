"""What the image and video pipelines return, whatever the family: PIL pictures, the tokens, stats, and save()."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from mmspec.layouts import FREE, Layout
from mmspec.pipelines.files import numbered, write_file
from mmspec.stats import Stats


def cells(values: torch.Tensor, layout: Layout) -> torch.Tensor:
    """[B, N] a value per generated token (its id, the forward that committed it) -> [B * t, h, w]: the grid's cells,
    frame by frame, the structural tokens (row ends, image ends) dropped. An image pipeline's `pictures` takes the
    cells of its tokens: what every family's tokens-to-pixels rule starts from."""
    free = (layout.forced() == FREE).to(values.device)
    return values[:, free].reshape(-1, layout.h, layout.w)


@dataclass
class ImageOutput:
    images: list  # PIL images, prompt-major: num_images per prompt
    prompts: list[str]
    tokens: torch.Tensor  # [B, N]
    stats: Stats
    summary: dict = field(default_factory=dict)  # NFE, mean acceptance length, seconds...

    def save(self, folder: "str | Path", stem: str = "image", overwrite: bool = False) -> list[Path]:
        """PNGs stem_000.png...; numbered after those already in `folder` unless `overwrite` (files.numbered)."""
        Path(folder).mkdir(parents=True, exist_ok=True)
        paths = [p for p, in numbered(folder, stem, len(self.images), ("png",), overwrite)]
        return [write_file(path, img.save, overwrite) for img, path in zip(self.images, paths)]


@dataclass
class VideoOutput:
    videos: list[list]  # per sample: its frames as PIL images
    prompts: list[str]
    tokens: torch.Tensor
    stats: Stats
    summary: dict = field(default_factory=dict)
    fps: int = 8
    scale: int = 4  # pixels per frame pixel in saved files (the bundled 32x32 frames: 4)

    def save(self, folder: "str | Path", stem: str = "video", formats=("gif", "mp4"),
             scale: "int | None" = None, overwrite: bool = False) -> list[Path]:
        """stem_000.gif, stem_000.mp4...; numbered after those already in `folder` unless `overwrite`."""
        import imageio.v3 as iio
        import numpy as np

        scale = self.scale if scale is None else scale
        Path(folder).mkdir(parents=True, exist_ok=True)
        paths = []
        for frames, names in zip(self.videos, numbered(folder, stem, len(self.videos), tuple(formats), overwrite)):
            arr = np.stack([np.asarray(f.resize((f.width * scale, f.height * scale), 0)) for f in frames])
            for path in names:
                kw = {"duration": 1000 / self.fps, "loop": 0} if path.suffix == ".gif" else {"fps": self.fps}
                image = every_frame_kept(arr) if path.suffix == ".gif" else arr
                paths.append(write_file(path, partial(iio.imwrite, image=image, **kw), overwrite))
        return paths


def every_frame_kept(frames):
    """[T, H, W, 3] uint8 frames for a GIF, a frame equal to the one before it told apart by the lowest bit of its first
    pixel's blue: Pillow's GIF writer merges such a frame into the one before (an 8-frame clip gave a 7-frame GIF beside
    its 8-frame MP4), which no per-frame option turns off."""
    import numpy as np

    repeated = np.flatnonzero((frames[1:] == frames[:-1]).reshape(len(frames) - 1, -1).all(1)) + 1
    if not len(repeated):
        return frames
    frames = frames.copy()
    for i in repeated:  # (after a change to frame i - 1, frame i is told apart from it: a run alternates)
        frames[i, 0, 0, 2] = frames[i - 1, 0, 0, 2] ^ 1
    return frames

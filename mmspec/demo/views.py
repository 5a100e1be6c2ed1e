"""What each kind of pipeline shows: partial outputs while generating, the final media, its token grid."""
from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from mmspec.demo.render import enlarge, filmstrip, grey_out, stack
from mmspec.pipelines import TextPipeline
from mmspec.pipelines.outputs import cells

TEXT_COLUMNS = 16  # the commit map wraps text tokens into rows of this many


class GridView:
    """Images and videos of any family: the cells of the pipeline's layout (structural tokens dropped) are the token
    grid of the commit map, and its `pictures` the partial outputs."""

    def __init__(self, pipe):
        self.pipe, layout = pipe, pipe.layout
        self.video = pipe.kind == "video"
        self.shape = (layout.t if self.video else 1, layout.h, layout.w)  # (T, H, W)
        self.frame_side = 96 if self.video else 256  # display size of one frame

    def preview(self, tokens: torch.Tensor, prompt: str):
        """tokens [B, N] (-1: not committed) -> the images, grey where nothing is committed yet; for
        video one picture: a row of frames per output."""
        T = self.shape[0]
        grids = cells(tokens, self.pipe.layout)
        frames = grey_out(self.pipe.pictures(grids), grids >= 0)
        frames = [enlarge(f, self.frame_side) for f in frames]
        if not self.video:
            return frames
        return stack([filmstrip(frames[i:i + T]) for i in range(0, len(frames), T)])

    def media(self, out, folder: Path) -> tuple[list, "str | None"]:
        """(gallery items, the first output's MP4 for video)."""
        if not self.video:
            return [enlarge(image, self.frame_side) for image in out.images], None
        paths = out.save(folder)
        return [str(p) for p in paths if p.suffix == ".gif"], next(str(p) for p in paths if p.suffix == ".mp4")

    def steps(self, commit_step: torch.Tensor) -> np.ndarray:
        """[B, N] -> [B, T, H, W] commit map panels."""
        return cells(commit_step.cpu(), self.pipe.layout).view(-1, *self.shape).numpy()


class TextView:
    """Text: the completion streamed as it is committed; the commit map wraps tokens into rows."""

    def __init__(self, pipe: TextPipeline):
        self.tokenizer = pipe.target.tokenizer
        self.context = pipe.target.model.config.get_text_config().max_position_embeddings

    def prompt_tokens(self, prompt: str) -> int:
        return len(self.tokenizer(prompt).input_ids)

    def preview(self, tokens: torch.Tensor, prompt: str) -> str:
        return join_outputs([prompt + self.tokenizer.decode(row[row >= 0].tolist(), skip_special_tokens=True)
                             for row in tokens])

    def media(self, out, folder: Path) -> tuple[str, None]:
        return join_outputs([p + t for p, t in zip(out.prompts, out.texts)]), None

    def runs(self, out) -> list[tuple[str, "str | None"]]:
        """The first output cut where the next forward's tokens begin, each piece labelled with how many
        tokens its forward committed (the prompt unlabelled): speculation at work, in the text."""
        ids, steps = out.tokens[0].tolist(), out.stats.commit_step[0].tolist()
        cuts = [0] + [i for i in range(1, len(ids)) if steps[i] != steps[i - 1]] + [len(ids)]
        texts = [self.tokenizer.decode(ids[:c], skip_special_tokens=True) for c in cuts]  # prefixes: no split
        pieces = [(texts[j + 1][len(texts[j]):], cuts[j + 1] - cuts[j]) for j in range(len(cuts) - 1)]
        return [(out.prompts[0], None)] + [(t, f"{n} token{'s' * (n > 1)}") for t, n in pieces]

    def steps(self, commit_step: torch.Tensor) -> np.ndarray:
        """[B, N] -> [B, 1, rows, TEXT_COLUMNS], padded with -1 (never committed)."""
        B, N = commit_step.shape
        rows = math.ceil(N / TEXT_COLUMNS)
        padded = torch.full((B, rows * TEXT_COLUMNS), -1, dtype=torch.long)
        padded[:, :N] = commit_step.cpu()
        return padded.view(B, 1, rows, TEXT_COLUMNS).numpy()


def join_outputs(texts: list[str]) -> str:
    if len(texts) == 1:
        return texts[0]
    return "\n\n".join(f"# ---- output {i} ----\n{t}" for i, t in enumerate(texts))


def as_files(value, folder: Path):
    """A picture -> the path of a PNG written once under a fresh name in `folder`; a list or dict of them mapped,
    anything else (text, paths) as it is. Gradio writes a picture handed as PIL in place at a path named by its bytes:
    a gallery's identical pictures (written from its threads at once) and a picture handed out again were rewritten
    while the browser read them, and it served torn files. A path is copied into its cache under a temporary name
    and renamed."""
    if isinstance(value, list):
        return [as_files(v, folder) for v in value]
    if isinstance(value, dict):
        return {k: as_files(v, folder) for k, v in value.items()}
    if not isinstance(value, Image.Image):
        return value
    fd, path = tempfile.mkstemp(suffix=".png", dir=folder)
    os.close(fd)
    value.save(path)
    return path

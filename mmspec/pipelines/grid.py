"""Image and video pipelines over the reference GPT and a VQ tokenizer (the bundled emoji models)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

import mmspec.layouts as layouts
from mmspec.adapters.reference import ReferenceTarget
from mmspec.api import generate
from mmspec.pipelines.base import (DEFAULT_METHOD, WindowMemories, as_list, chain, model_path, progress, remember,
                                   resolve_window, stats_dict, window_folder)
from mmspec.pipelines.prompts import encode_prompt
from mmspec.reference.checkpoint import load_gpt
from mmspec.stats import Stats
from mmspec.tokenizers.vq import VQTokenizer
from mmspec.window import load_prior


@dataclass
class ImageOutput:
    images: list  # PIL images, prompt-major: num_images per prompt
    prompts: list[str]
    tokens: torch.Tensor  # [B, N]
    stats: Stats
    summary: dict = field(default_factory=dict)  # NFE, mean acceptance length, seconds...

    def save(self, folder: "str | Path", stem: str = "image") -> list[Path]:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = [folder / f"{stem}_{i:03d}.png" for i in range(len(self.images))]
        for img, path in zip(self.images, paths):
            img.save(path)
        return paths


@dataclass
class VideoOutput:
    videos: list[list]  # per sample: its frames as PIL images
    prompts: list[str]
    tokens: torch.Tensor
    stats: Stats
    summary: dict = field(default_factory=dict)
    fps: int = 8

    def save(self, folder: "str | Path", stem: str = "video", formats=("gif", "mp4"), scale: int = 4) -> list[Path]:
        import imageio.v3 as iio
        import numpy as np

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, frames in enumerate(self.videos):
            arr = np.stack([np.asarray(f.resize((f.width * scale, f.height * scale), 0)) for f in frames])
            for fmt in formats:
                path = folder / f"{stem}_{i:03d}.{fmt}"
                kw = {"duration": 1000 / self.fps, "loop": 0} if fmt == "gif" else {"fps": self.fps}
                iio.imwrite(path, arr, **kw)
                paths.append(path)
        return paths


class _GridPipeline:
    default_model: str

    def __init__(self, target: ReferenceTarget, tokenizer: VQTokenizer, layout: layouts.Layout,
                 vocab: list[str], default_sampling: dict):
        self.target, self.tokenizer, self.layout = target, tokenizer, layout
        self.vocab, self.default_sampling = vocab, default_sampling
        self.cond_len = target.model.config.cond_len
        self.window_memory = WindowMemories()  # window="auto" learns costs and acceptance across calls

    @classmethod
    def from_pretrained(cls, path: "str | Path | None" = None, device="cpu", dtype=torch.float32):
        path = model_path(path, cls.default_model)
        config = json.loads((path / "config.json").read_text())
        layout = model_layout(path)
        tokenizer = VQTokenizer.from_pretrained(model_path(path / config["tokenizer"], ""), device=device)
        vocab = json.loads((path / config.get("prompt_vocab", "vocab.json")).read_text())
        target = ReferenceTarget(load_gpt(path, dtype=dtype, device=device))
        pipe = cls(target, tokenizer, layout, vocab, config.get("default_sampling", {}))
        pipe._load_extras(path, config, device, dtype)
        pipe.window_memory = WindowMemories(window_folder(path), device, load_prior(path))
        return pipe

    def _load_extras(self, path: Path, config: dict, device, dtype) -> None:
        """Models a pipeline uses besides its own, named in config.json."""

    def __call__(self, prompt, num_outputs: int = 1, seed=0, method=DEFAULT_METHOD, window: "int | str | None" = None,
                 sampling: "dict | None" = None, progress_bar: bool = False, image=None, mask=None,
                 on_commit=None):
        """on_commit(state, k) is called after every forward (see mmspec.generate), e.g. to show partial grids."""
        prompts = as_list(prompt)
        rows = [p for p in prompts for _ in range(num_outputs)]
        t0 = time.perf_counter()
        given, extra = self._given(rows, image, mask, seed=seed, progress_bar=progress_bar)
        window = resolve_window(window, self.default_window, self.window_memory, method)
        cond = torch.tensor([encode_prompt(p, self.vocab, self.cond_len) for p in prompts])
        sampling = sampling if sampling is not None else self.default_sampling
        with progress(len(rows) * self.layout.length, type(self).__name__, progress_bar) as hook:
            out = generate(self.target, cond, self.layout, method=method, window=window, sampling=sampling,
                           seed=seed, num_samples=num_outputs, on_commit=chain(hook, on_commit), given=given)
        remember(window)
        output = self._output(out, rows, time.perf_counter() - t0)
        output.summary.update(extra)
        return output

    def score_gap(self, prompt: str, seed: int, tokens: torch.Tensor, index: int, other: int,
                  sampling: "dict | None" = None) -> float:
        """log p + g of tokens[index] minus that of `other` at the same index, recomputed in fp64 by one
        teacher-forced forward over `tokens` [N] (row seed `seed`): how close to a tie the choice between them was.
        What the lossless check uses to tell a rounding tie from a changed token."""
        import copy

        from mmspec.rng import Streams
        from mmspec.sampling import Sampling

        model = copy.deepcopy(self.target.model).double()
        cond = torch.tensor([encode_prompt(prompt, self.vocab, self.cond_len)], device=tokens.device)
        positions = self.layout.positions()
        with torch.no_grad():
            c = model.forward_sequence(cond, tokens[None], positions)[0, index]
            u = model.forward_sequence(model.null_condition(1), tokens[None], positions)[0, index]
        sampling = Sampling.coerce(sampling if sampling is not None else self.default_sampling)
        score = sampling.logp(c, u if sampling.cfg else None).double()
        score = score + Streams([seed], model.config.vocab_size, tokens.device).gumbel(torch.tensor([[index]]))[0, 0]
        return float(score[int(tokens[index])] - score[other])

    def _image_frame(self, image) -> torch.Tensor:
        """A PIL image or a path -> [h * w] tokens of it resized to this model's frame."""
        from PIL import Image

        image = open_picture(image, "image")
        if not hasattr(image, "convert"):
            raise TypeError(f"image must be a PIL image, a path or an ImageOutput, not {type(image).__name__}")
        h, w, down = self.layout.h, self.layout.w, self.tokenizer.downsample
        return self.tokenizer.encode(image.convert("RGB").resize((w * down, h * down), Image.LANCZOS))[0].flatten()


def open_picture(picture, what: str):
    """A path -> the PIL image in that file (a clear error when there is none); anything else as it is."""
    from PIL import Image

    if not isinstance(picture, (str, Path)):
        return picture
    if not Path(picture).is_file():
        raise FileNotFoundError(f"no {what} file at {picture}")
    return Image.open(picture)


def model_layout(path: "str | Path") -> layouts.Layout:
    """A model folder's token grid, from its config.json: what checking a mask needs, without loading the model."""
    config = json.loads((Path(path) / "config.json").read_text())
    return getattr(layouts, config["layout"]["type"])(*config["layout"]["shape"])


def token_mask(mask, h: int, w: int) -> torch.Tensor:
    """A mask image, its path, or an array [H, W] (nonzero = regenerate) -> [h, w] bool: a token is regenerated
    when any pixel of its patch is."""
    import numpy as np

    mask = open_picture(mask, "mask")
    m = torch.as_tensor(np.asarray(mask.convert("L") if hasattr(mask, "convert") else mask) > 0)
    if m.dim() != 2 or m.shape[0] % h or m.shape[1] % w:
        raise ValueError(f"mask must be [H, W] with H, W multiples of the token grid {h} x {w}, got {tuple(m.shape)}")
    return m.view(h, m.shape[0] // h, w, m.shape[1] // w).any(3).any(1)


class ImagePipeline(_GridPipeline):
    """prompt(s) -> PIL images; `num_outputs` images per prompt. With `image` and `mask` (nonzero where to
    regenerate), inpainting: the tokens outside the mask are given, the others generated around them."""

    default_model = "emoji-image"
    default_window = 16

    def _given(self, rows, image, mask, **call) -> tuple["torch.Tensor | None", dict]:
        if image is None and mask is None:
            return None, {}
        if image is None or mask is None:
            raise ValueError("inpainting needs both image= and mask= (nonzero where to regenerate)")
        if isinstance(image, ImageOutput):
            image = image.images[0]
        keep = ~token_mask(mask, self.layout.h, self.layout.w).flatten()  # [h * w]
        return torch.where(keep, self._image_frame(image), -1)[None], {}

    def _output(self, out, prompts, seconds):
        grid = out.tokens.view(-1, self.layout.h, self.layout.w)
        return ImageOutput(self.tokenizer.decode_pil(grid), prompts, out.tokens, out.stats,
                           stats_dict(out.stats, seconds))


class VideoPipeline(_GridPipeline):
    """prompt(s) -> videos (lists of PIL frames), savable as GIF and MP4. Frame 0 is given and the others are
    generated after it: from `image` (a PIL image or a path, resized to a frame; or an `ImageOutput` of the
    emoji-image model, one image per output or one for all, staged as the prompt's scene), or, without one,
    rendered from the prompt by the model's first-frame image model (text -> image -> video)."""

    default_model = "emoji-video"
    # frames repeat, so long windows are accepted in long runs: with frame 0 given, 64 positions cut forwards
    # 11.6-11.8x and CPU time 2.95-3.2x against ar at 1 row on a 2-core CPU (coupled and exact; benchmarks/README.md)
    default_window = 64
    image_model: "ImagePipeline | None" = None  # renders frame 0 when no image is given

    def _load_extras(self, path: Path, config: dict, device, dtype) -> None:
        if "first_frame_model" in config:
            self.image_model = ImagePipeline.from_pretrained(model_path(path / config["first_frame_model"], ""),
                                                             device=device, dtype=dtype)

    def _given(self, rows, image, mask, **call) -> tuple["torch.Tensor | None", dict]:
        if mask is not None:
            raise ValueError("a video takes image= (its first frame), not mask=")
        extra = {}
        if image is None:
            if self.image_model is None:
                return None, {}
            image = self._render_first_frames(rows, **call)
            extra["first_frame"] = image.summary
        if isinstance(image, ImageOutput):
            if len(image.images) not in (1, len(rows)):
                raise ValueError(f"image= has {len(image.images)} images for {len(rows)} videos: give one, or one per video")
            pictures = image.images * (len(rows) // len(image.images))
            frames = torch.stack([self._image_frame(self._staged(p, r)) for p, r in zip(pictures, rows)])
        else:
            frames = self._image_frame(image)[None]  # [1, h * w]
        given = torch.full((len(frames), self.layout.length), -1)
        given[:, : frames.shape[1]] = frames
        return given, extra

    def _render_first_frames(self, rows, *, seed, progress_bar) -> "ImageOutput":
        """One emoji-image picture per video row, of the subject its prompt names, with the same seed. Drawn with
        `exact` (plain AR's tokens for the seed, at the image model's own sampling) whatever the video's method:
        every method starts a video from the same picture, so methods differ only in what they are asked to
        (the frames after it) and a greedy video is the same under every method."""
        from mmspec.pipelines.scene import parse

        subjects = [parse(r)[2] or r for r in rows]
        return self.image_model(subjects, seed=seed, method="exact", window="auto", progress_bar=progress_bar)

    def _staged(self, picture, prompt: str):
        """An emoji on white -> the first frame of the prompt's scene (motion start, background colour)."""
        from mmspec.pipelines.scene import first_frame, parse

        motion, colour, _ = parse(prompt)
        return first_frame(picture, motion, colour, size=self.layout.w * self.tokenizer.downsample)

    def _output(self, out, prompts, seconds):
        t, h, w = self.layout.t, self.layout.h, self.layout.w
        frames = self.tokenizer.decode_pil(out.tokens.view(-1, h, w))
        videos = [frames[i * t:(i + 1) * t] for i in range(out.tokens.shape[0])]
        return VideoOutput(videos, prompts, out.tokens, out.stats, stats_dict(out.stats, seconds))

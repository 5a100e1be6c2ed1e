"""Image and video pipelines over the reference GPT and a VQ tokenizer (the bundled emoji models)."""
from __future__ import annotations

import io
import time
import warnings
from functools import partial
from pathlib import Path

import torch

import mmspec.layouts as layouts
from mmspec.adapters.reference import ReferenceTarget
from mmspec.api import generate
from mmspec.request import row_seeds
from mmspec.arguments import check_arguments
from mmspec.pipelines.base import DEFAULT_METHOD, DEFAULT_WINDOW, Pipeline, as_list, model_path, models_dir
from mmspec.pipelines.folders import named_folder, read_config, read_json
from mmspec.pipelines.outputs import ImageOutput, VideoOutput, cells
from mmspec.pipelines.prompts import (check_prompt, encode_prompt, listing, shorten, unknown_words, unreadable,
                                      words)
from mmspec.pipelines.scene import Staging, staging
from mmspec.pipelines.subjects import KEY as SUBJECTS
from mmspec.pipelines.subjects import PromptWarning, names_one, unnamed_note
from mmspec.reference.checkpoint import load_gpt
from mmspec.threads import module_device, scoped
from mmspec.tokenizers.vq import VQTokenizer
from mmspec.window import WindowCache


class _GridPipeline(Pipeline):
    subjects: "list[str] | None" = None  # what a prompt must name, where the model's config lists it

    def __init__(self, target: ReferenceTarget, tokenizer: VQTokenizer, layout: layouts.Layout,
                 vocab: list[str], default_sampling: dict):
        super().__init__()
        self.target, self.tokenizer, self.layout = target, tokenizer, layout
        self.vocab, self.default_sampling = vocab, default_sampling
        self.cond_len = target.model.config.cond_len
        self._warned: set[str] = set()  # prompts and words already named in a warning

    @classmethod
    def load_folder(cls, path: "str | Path | None", device="cpu", dtype=torch.float32,
                    window_cache: "WindowCache | str | Path | None" = None, compile: "bool | dict" = False):
        """A reference GPT folder (None: the bundled model); from_pretrained is the door for every family."""
        path = model_path(path, cls.default_model)
        config = read_config(path, ("layout", "tokenizer"))
        layout = model_layout(path)
        tokenizer = VQTokenizer.from_pretrained(named_folder(path, config, "tokenizer"), device=device)
        vocab = read_json(path / config.get("prompt_vocab", "vocab.json"), "prompt vocabulary")
        target = ReferenceTarget(load_gpt(path, dtype=dtype, device=device))
        pipe = cls(target, tokenizer, layout, vocab, config.get("default_sampling", {}))
        window_cache = WindowCache.coerce(window_cache)
        pipe._load_extras(path, config, device, dtype, window_cache)
        pipe.window_memory = window_cache.memories(path, device)
        pipe.folder, pipe.compile, pipe.subjects = path, compile, config.get(SUBJECTS)
        return pipe

    @property
    def target_depth(self) -> int:
        return self.target.model.config.n_layer

    def _load_extras(self, path: Path, config: dict, device, dtype, window_cache: WindowCache) -> None:
        """Models a pipeline uses besides its own, named in config.json."""

    def pictures(self, grid: torch.Tensor) -> list:
        """[B, h, w] token cells (-1: none yet, any picture there) -> PIL images: the VQ tokenizer's decode."""
        return self.tokenizer.decode_pil(grid.clamp(min=0))

    @scoped(lambda self, *args, **kwargs: module_device(self.target))
    def __call__(self, prompt, num_outputs: int = 1, seed=0, method=DEFAULT_METHOD, window=DEFAULT_WINDOW,
                 sampling: "dict | None" = None, progress_bar: bool = False, image=None, mask=None,
                 on_commit=None, compile=None, batch_size: "int | None" = None):
        """on_commit(state, k) is called after every forward (see mmspec.generate), e.g. to show partial grids;
        compile: mmspec.generate's (None: the pipeline's, from from_pretrained); batch_size: rows at a time (None: as
        many as fit in memory; mmspec.generate's)."""
        prompts = as_list(prompt)
        check_arguments(num_outputs=num_outputs, on_commit=on_commit, compile=compile, progress_bar=progress_bar)
        for p in prompts:
            check_prompt(p)
        rows = [p for p in prompts for _ in range(num_outputs)]
        seed = row_seeds(seed, len(rows), num_outputs)  # (a video's first frames are drawn with its rows' seeds)
        started = time.perf_counter()
        planned = self.plan(method, window)  # before a first frame is drawn
        cond = self.condition(prompts)
        self.check_call(prompts, len(rows), batch_size, method=planned, sampling=sampling, image=image, mask=mask)
        given, extra = self._given(rows, image, mask, seed=seed, progress_bar=progress_bar,
                                   speculate=planned.speculates, batch_size=batch_size)
        run = partial(generate, self.target, cond, self.layout, seed=seed, num_outputs=num_outputs, given=given,
                      batch_size=batch_size)
        out, summary = self._generate(run, total=len(rows) * self.layout.length, planned=planned,
                                      sampling=sampling, progress_bar=progress_bar, on_commit=on_commit,
                                      started=started, compile=compile)
        return self._output(out, rows, {**summary, **extra})

    def condition(self, prompts: list[str]) -> torch.Tensor:
        """[C, cond_len] prompt word ids, with one warning (PromptWarning) of what the model cannot take in
        (`prompt_note`), once per word and prompt: a render job repeats its prompts batch after batch."""
        note, named = self.prompt_note(prompts, self._warned)
        if note is not None:
            self._warned.update(named)
            # (stacklevel: the caller of __call__, past its threads wrapper)
            warnings.warn(f"{type(self).__name__}: {note}", PromptWarning, stacklevel=4)
        return torch.tensor([encode_prompt(p, self.vocab, self.cond_len) for p in prompts])

    def prompt_note(self, prompts: list[str], said: "set[str]" = frozenset()) -> tuple["str | None", set[str]]:
        """What the model cannot take in of `prompts`, leaving out the words and prompts in `said` -> (one line or
        None, the words and prompts it names): a prompt that names none of the model's subjects (where its config
        lists them: mmspec.pipelines.subjects), words it does not know (they get the unknown word's id), characters
        outside ASCII (another script, emoji: dropped), and words past its cond_len (cut off), saying what it kept."""
        unnamed = [p for p in prompts if self.subjects and not names_one(p, self.subjects) and p not in said]
        unknown = sorted({w for p in prompts if p not in unnamed for w in unknown_words(p, self.vocab)} - said)
        foreign = sorted({w for p in prompts for w in unreadable(p)} - said)
        long = [p for p in prompts if len(words(p)) > self.cond_len and p not in said]
        notes = [unnamed_note(p, self.subjects, self._listed_as()) for p in unnamed[:3]]
        notes += [f"does not know {listing(unknown)} (it reads them as an unknown word)"] * bool(unknown)
        notes += [f"cannot read {listing(foreign)} (it reads only ASCII letters and digits: dropped)"] * bool(foreign)
        notes += [f"reads {self.cond_len} words of a prompt: it kept {shorten(' '.join(words(p)[:self.cond_len]), 80)!r} "
                  f"of {shorten(p)!r} ({len(words(p)) - self.cond_len} words dropped)" for p in long[:3]]
        named = {*unnamed, *(w for p in unnamed for w in words(p)), *unknown, *foreign, *long}
        return (f"the model {'; '.join(notes)}" if notes else None), named

    def _listed_as(self) -> "str | None":
        """How `mmspec models` names this pipeline's model: a bundled model by its name, another by its folder."""
        if self.folder is None:
            return None
        return self.folder.name if self.folder.parent.resolve() == models_dir().resolve() else str(self.folder)

    def _image_frame(self, image) -> torch.Tensor:
        """A PIL image or a path -> [h * w] tokens of it resized to this model's frame."""
        from PIL import Image

        image = open_picture(image, "image")
        if not hasattr(image, "convert"):
            raise TypeError(f"image must be a PIL image, a path or an ImageOutput, not {type(image).__name__}")
        h, w, down = self.layout.h, self.layout.w, self.tokenizer.downsample
        check_size(image, (w, h), (w * down, h * down))
        return self.tokenizer.encode(image.convert("RGB").resize((w * down, h * down), Image.LANCZOS))[0].flatten()


MAX_SIDE = 4096  # pixels a side of a picture a pipeline takes


def check_size(picture, grid: tuple[int, int], frame: tuple[int, int]) -> None:
    """A picture is resized to the model's `frame` (width, height in pixels): refused in one line where a side is
    narrower than the token `grid`'s (a token would have no pixel of its own) or wider than MAX_SIDE (a photo
    thousands of pixels wide for a frame of 32 is a wrong file: a 1x1 and a 5000x5000 picture were resized silently)."""
    if min(picture.width - grid[0], picture.height - grid[1]) < 0 or max(picture.size) > MAX_SIDE:
        raise ValueError(f"image is {picture.width}x{picture.height} pixels: this model's frames are {frame[0]}x"
                         f"{frame[1]}, so give a picture between {grid[0]}x{grid[1]} and {MAX_SIDE}x{MAX_SIDE} "
                         "(it is resized to the frame)")


def open_picture(picture, what: str = "image", source: "str | None" = None):
    """A path or a file's bytes (`source`: how errors name them) -> the decoded PIL image in it, with an error that
    names the file when there is none; anything else as it is."""
    from PIL import Image

    if not isinstance(picture, (str, Path, bytes)):
        return picture
    if not isinstance(picture, bytes) and not Path(picture).is_file():
        raise FileNotFoundError(f"no {what} file at {picture}")
    try:
        opened = Image.open(io.BytesIO(picture) if isinstance(picture, bytes) else picture)
        opened.load()  # decode now: a truncated file fails here, not inside the pipeline
    except (OSError, Image.DecompressionBombError) as err:
        reason = "not a format PIL reads" if isinstance(err, Image.UnidentifiedImageError) else err
        raise ValueError(f"{source or f'{what} {picture}'} is not an image file ({reason}): give a PNG, JPEG or "
                         "another picture PIL opens") from None
    return opened


def model_layout(path: "str | Path") -> layouts.Layout:
    """A model folder's token grid, from its config.json: what checking a mask needs, without loading the model."""
    config = read_config(Path(path), ("layout",))
    try:
        return getattr(layouts, config["layout"]["type"])(*config["layout"]["shape"])
    except (AttributeError, KeyError, TypeError) as err:
        raise ValueError(f"{Path(path) / 'config.json'}: layout must be {{'type': 'Grid2D' or 'Grid3D', 'shape': "
                         f"[...]}}, got {config['layout']!r} ({err})") from None


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

    kind, default_model, opens_families = "image", "emoji-image", True
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

    def _requests(self, prompts, image=None, mask=None, **call) -> list[tuple]:
        given = None if mask is None else torch.where(token_mask(mask, self.layout.h, self.layout.w).flatten(), -1, 0)
        return [(self.target, self.condition(prompts), self.layout, None if given is None else given[None])]

    def _output(self, out, prompts, summary):
        return ImageOutput(self.pictures(cells(out.tokens, self.layout)), prompts, out.tokens, out.stats, summary)


class VideoPipeline(_GridPipeline):
    """prompt(s) -> videos (lists of PIL frames), savable as GIF and MP4. Frame 0 is given and the others are
    generated after it: from `image` (a PIL image or a path, resized to a frame; or an `ImageOutput`, one image per
    output or one for all), or, without one, drawn from the prompt by the model's first-frame image model when its
    config names one (`first_frame_model`: text -> image -> video); else the model generates frame 0 too.
    A model may declare how a picture becomes its first frame (`first_frame_staging`, e.g. the bundled
    emoji-video's "emoji-sprite": mmspec.pipelines.scene)."""

    kind, default_model, opens_families = "video", "emoji-video", True
    # frames repeat, so long windows are accepted in long runs: with frame 0 given, 64 positions cut forwards
    # 11.6-11.8x and CPU time 2.95-3.2x against ar at 1 row on a 2-core CPU (coupled and exact; benchmarks/README.md)
    default_window = 64
    image_model: "ImagePipeline | None" = None  # renders frame 0 when no image is given
    staging: "Staging | None" = None  # how the model wants a picture staged as its first frame

    def parts(self) -> list[Pipeline]:
        return [] if self.image_model is None else [self.image_model]

    def _load_extras(self, path: Path, config: dict, device, dtype, window_cache: WindowCache) -> None:
        if "first_frame_model" in config:
            self.image_model = ImagePipeline.from_pretrained(named_folder(path, config, "first_frame_model"),
                                                             device=device, dtype=dtype, window_cache=window_cache)
        if "first_frame_staging" in config:
            self.staging = staging(config["first_frame_staging"], path / "config.json")

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

    def check_call(self, prompts: list, rows: int, batch_size: "int | None", *, method=DEFAULT_METHOD,
                   window=DEFAULT_WINDOW, image=None, **call) -> None:
        planned = self.plan(method, window)
        super().check_call(prompts, rows, batch_size, method=planned, image=image, **call)
        if image is None and self.image_model is not None:  # and the first frames' call, as `_render_first_frames`
            first, window = _first_frame_method(planned.speculates)
            self.image_model.check_call(self._subjects(prompts), rows, batch_size, method=first, window=window)

    def _requests(self, prompts, image=None, **call) -> list[tuple]:
        given = None
        if image is not None or self.image_model is not None:  # frame 0 given (its tokens: any)
            given = torch.full((1, self.layout.length), -1)
            given[0, : self.layout.h * self.layout.w] = 0
        return [(self.target, self.condition(prompts), self.layout, given)]

    def _render_first_frames(self, rows, *, seed, progress_bar, speculate: bool = True,
                             batch_size: "int | None" = None) -> "ImageOutput":
        """One picture per video row by the first-frame model, of what its prompt asks for (with staging, the
        subject it names), with the same seed: plain AR's picture for the seed, at the image model's own sampling,
        whatever the video's method. Every method starts a video from the same picture, so methods differ only in
        what they are asked to (the frames after it) and a greedy video is the same under every method. A video
        that speculates draws it with `exact` (AR's tokens, fewer forwards); one that does not (`ar`, window 1)
        with plain `ar`, so that a plain run, the baseline speed-ups are measured against, is plain throughout."""
        method, window = _first_frame_method(speculate)
        return self.image_model(self._subjects(rows), seed=seed, method=method, window=window,
                                progress_bar=progress_bar, batch_size=batch_size)

    def _subjects(self, prompts: list) -> list:
        """What the first-frame model is asked to draw for each prompt: with staging, the subject it names."""
        return [self.staging.subject(p) for p in prompts] if self.staging is not None else prompts

    def _staged(self, picture, prompt: str):
        """A first-frame model's picture -> the first frame the video model expects for the prompt."""
        if self.staging is None:
            return picture
        return self.staging.first_frame(picture, prompt, size=self.layout.w * self.tokenizer.downsample)

    def _output(self, out, prompts, summary):
        t = self.layout.t
        frames = self.pictures(cells(out.tokens, self.layout))
        videos = [frames[i * t:(i + 1) * t] for i in range(out.tokens.shape[0])]
        return VideoOutput(videos, prompts, out.tokens, out.stats, summary)


def prompt_notes(pipe, prompt: str, first_frame_given: bool = False) -> list[str]:
    """What a pipeline's models cannot take in of `prompt` (`prompt_note`; a video's first-frame model too, when it
    draws frame 0), every time: the demo shows them beside each output."""
    notes = [pipe.prompt_note([prompt])[0]] if isinstance(pipe, _GridPipeline) else []
    if isinstance(pipe, VideoPipeline) and pipe.image_model is not None and not first_frame_given:
        notes.append(pipe.image_model.prompt_note(pipe._subjects([prompt]))[0])
    return [note for note in notes if note is not None]


def _first_frame_method(speculate: bool) -> tuple[str, "str | int"]:
    """The method and window a video's first frames are drawn with: `exact` when the video speculates, else `ar`."""
    return ("exact", "auto") if speculate else ("ar", 1)

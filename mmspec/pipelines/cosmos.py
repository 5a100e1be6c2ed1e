"""Video continuation with a Cosmos-1 autoregressive folder (base 4B/12B; Video2World 5B/13B with text features).

The given frames are encoded by the folder's discrete video tokenizer and committed as given tokens (their latent
frames); the model generates the rest of its latent grid, and the tokenizer decodes the whole grid to frames, as
Cosmos's own pipeline does (without its diffusion decoder). Sampling defaults to Cosmos's (temperature 1, top-p 0.8).
A Video2World prompt is T5 features, or text when the folder's config.json names a local T5 encoder folder
(`text_encoder`: a transformers T5EncoderModel with its tokenizer, safetensors; loaded at the first text prompt).
"""
from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import torch

from mmspec.adapters.cosmos import CosmosTarget, refuse_cfg
from mmspec.api import generate
from mmspec.pipelines.base import DEFAULT_METHOD, Pipeline, model_path
from mmspec.pipelines.folders import read_config, read_features
from mmspec.pipelines.outputs import VideoOutput
from mmspec.reference.cosmos_checkpoint import COSMOS_SAMPLING, load_cosmos
from mmspec.threads import module_device, scoped
from mmspec.tokenizers.cosmos import DiscreteVideoTokenizer
from mmspec.window import WindowCache


class CosmosPipeline(Pipeline):
    kind, default_model = "video", "cosmos"  # (no bundled Cosmos: a folder must be named)
    # SCD's setting on Cosmos: windows of 64 with maximal coupling
    default_window = 64

    text_encoder_folder: "Path | None" = None  # a local T5 encoder for text prompts (config.json's text_encoder)

    def __init__(self, target: CosmosTarget, tokenizer: DiscreteVideoTokenizer, default_sampling: dict, fps: int):
        super().__init__()
        self.target, self.tokenizer, self.fps = target, tokenizer, fps
        self.t5 = None  # (tokenizer, encoder), loaded at the first text prompt
        self.layout = target.model.layout
        self.default_sampling = default_sampling

    @classmethod
    def load_folder(cls, path: "str | Path", device="cpu", dtype=torch.float32,
                    window_cache: "WindowCache | str | Path | None" = None, compile: "bool | dict" = False,
                    allow_torchscript: bool = False) -> "CosmosPipeline":
        """A Cosmos folder (`mmspec convert cosmos`); its tokenizer is TorchScript, loaded only with
        allow_torchscript=True."""
        path = model_path(path, cls.default_model)
        config = read_config(path, ("cosmos",))
        tokenizer = DiscreteVideoTokenizer.from_pretrained(path / config.get("tokenizer", "tokenizer"),
                                                           allow_torchscript, device)
        model = load_cosmos(path, dtype=dtype, device=device)
        if tokenizer.vocab_size != model.config.vocab_size:
            raise ValueError(f"{path}: the tokenizer has {tokenizer.vocab_size} codes, the model "
                             f"{model.config.vocab_size}")
        pipe = cls(CosmosTarget(model), tokenizer, config.get("default_sampling", COSMOS_SAMPLING),
                   config.get("fps", 25))  # (Cosmos's scripts save their videos at 25 fps)
        pipe.window_memory = WindowCache.coerce(window_cache).memories(path, device)
        pipe.folder, pipe.compile = path, compile
        if "text_encoder" in config:
            pipe.text_encoder_folder = path / config["text_encoder"]
        return pipe

    @property
    def target_depth(self) -> int:
        return self.target.model.config.n_layers

    @property
    def frame_size(self) -> tuple[int, int]:
        """(height, width) in pixels of the frames the model's grid decodes to."""
        _, h, w = self.target.model.config.latent_shape
        return h * self.tokenizer.compression[1], w * self.tokenizer.compression[2]

    @property
    def accepted_frames(self) -> list[int]:
        """Given-frame counts the tokenizer makes whole latent frames of, leaving at least one to generate."""
        return [self.tokenizer.frames(t) for t in range(1, self.layout.t)]

    def check_video(self, frames: torch.Tensor, what: str = "video") -> None:
        """Refuse frames [F, H, W, 3] the tokenizer cannot take, saying what it takes."""
        H, W = self.frame_size
        F = frames.shape[0]
        if frames.dim() != 4 or frames.shape[1:] != (H, W, 3) or F not in self.accepted_frames:
            size = f"{frames.shape[2]}x{frames.shape[1]}" if frames.dim() == 4 else f"shape {tuple(frames.shape)}"
            counts = " or ".join(map(str, self.accepted_frames))
            raise ValueError(f"{what} has {F} frames of {size}; this model's tokenizer takes {counts} RGB frames of "
                             f"{W}x{H} (a first frame, then {self.tokenizer.compression[0]} per latent frame)")

    def _requests(self, prompt=None, video=None, **call) -> list[tuple]:
        given = None
        if video is not None:  # (read at the call) the most a video may give: every latent frame but the last
            given = torch.full((1, self.layout.length), -1)
            given[0, : (self.layout.t - 1) * self.layout.h * self.layout.w] = 0
        return [(self.target, self.condition(prompt), self.layout, given)]

    @scoped(lambda self, *args, **kwargs: module_device(self.target))
    def __call__(self, prompt=None, video=None, num_outputs: int = 1, seed=0, method=DEFAULT_METHOD, window=None,
                 sampling: "dict | None" = None, progress_bar: bool = False, on_commit=None, compile=None,
                 batch_size: "int | None" = None):
        """video: the given frames (a file imageio reads, or uint8 [F, H, W, 3]); prompt (Video2World): T5 features
        [S, context_dim] or [1, S, context_dim], or (features, mask), or a .safetensors file holding "context" (and
        "context_mask"), as Cosmos's pipeline passes them, or text with a local T5 encoder (`text_encoder`);
        `num_outputs` continuations; batch_size: mmspec.generate's."""
        started = time.perf_counter()
        refuse_cfg((sampling or {}).get("cfg_scale"))  # (before the prompt's T5 and the video's encoding)
        planned = self.plan(method, window)
        condition = self.condition(prompt)
        given, names = None, ["video"]
        if video is not None:
            frames = read_video(video)
            self.check_video(frames, "video" if not isinstance(video, (str, Path)) else str(video))
            tokens = self.tokenizer.encode(frames, self.tokenizer.frames(self.layout.t)).flatten()  # [t * h * w]
            given = torch.full((1, self.layout.length), -1)
            given[0, : len(tokens)] = tokens.cpu()
            names = [str(video) if isinstance(video, (str, Path)) else "video"]
        elif not self.target.model.config.video2world:
            raise ValueError("a Cosmos base model continues a video: pass video= (the CLI's --video), "
                             f"{' or '.join(map(str, self.accepted_frames))} frames")
        # (the given tokens as encoded: `_requests`' are the most a video may give)
        self._check_requests([(self.target, condition, self.layout, given)], num_outputs, batch_size, planned,
                             sampling)
        run = partial(generate, self.target, condition, self.layout, seed=seed, num_outputs=num_outputs, given=given,
                      batch_size=batch_size)
        out, summary = self._generate(run, total=num_outputs * self.layout.length, planned=planned,
                                      sampling=sampling, progress_bar=progress_bar, on_commit=on_commit,
                                      started=started, compile=compile)
        from PIL import Image

        frames = self.tokenizer.decode(out.tokens.view(-1, *self.target.model.config.latent_shape))  # [B, F, H, W, 3]
        videos = [[Image.fromarray(f.numpy()) for f in clip] for clip in frames]
        return VideoOutput(videos, names * num_outputs, out.tokens, out.stats, summary, fps=self.fps, scale=1)

    def condition(self, prompt):
        """The text condition of a Video2World model (None for a base model)."""
        video2world = self.target.model.config.video2world
        if prompt is None:
            if video2world:
                raise ValueError("a Video2World model needs prompt=: T5 features [S, 1024] or a .safetensors file "
                                 "holding 'context' (a local T5 is not run)")
            return None
        if not video2world:
            raise ValueError("a Cosmos base model takes no prompt (it continues the video); a Video2World folder does")
        if isinstance(prompt, Path) or isinstance(prompt, str) and prompt.endswith(".safetensors"):
            prompt = read_features(prompt)
        elif isinstance(prompt, str):
            prompt = self.encode_text(prompt)
        features, mask = prompt if isinstance(prompt, (tuple, list)) else (prompt, None)
        features = torch.as_tensor(features)
        if features.dim() == 2:
            features, mask = features[None], None if mask is None else torch.as_tensor(mask)[None]
        return features if mask is None else (features, mask)


    @torch.no_grad()
    def encode_text(self, prompt: str, max_length: int = 512) -> torch.Tensor:
        """Text -> T5 features [1, max_length, C] as Cosmos makes them: padded to 512 tokens, the encoder's states past
        the prompt set to zero, all of them attended to (Cosmos's AR pipeline passes an all-ones mask)."""
        if self.text_encoder_folder is None:
            raise ValueError("a text prompt needs a local T5 encoder: name its folder in config.json's "
                             "'text_encoder' (docs/cosmos.md), or pass T5 features (a .safetensors file holding "
                             "'context')")
        if self.t5 is None:
            from transformers import AutoTokenizer, T5EncoderModel

            from mmspec.loading import load_pretrained

            folder, device = self.text_encoder_folder, self.target.model.tok_embeddings.weight.device
            encoder = load_pretrained(T5EncoderModel, folder, "T5 text encoder", torch.float32, False, {"t5"}, device)
            self.t5 = AutoTokenizer.from_pretrained(folder, local_files_only=True), encoder
        tokenizer, encoder = self.t5
        batch = tokenizer([prompt], return_tensors="pt", truncation=True, padding="max_length", max_length=max_length)
        mask = batch.attention_mask.to(encoder.device)
        states = encoder(input_ids=batch.input_ids.to(encoder.device), attention_mask=mask).last_hidden_state
        return states * mask[..., None]


def read_video(video) -> torch.Tensor:
    """A video file (MP4, GIF...: what imageio reads) or frames -> uint8 [F, H, W, 3]."""
    if isinstance(video, (str, Path)):
        import imageio.v3 as iio

        if not Path(video).is_file():
            raise FileNotFoundError(f"no video file at {video}")
        try:
            frames = iio.imread(video)
        except (OSError, ValueError) as err:
            raise ValueError(f"{video} is not a video file imageio reads ({err})") from None
        return torch.from_numpy(frames[..., :3].copy())
    if isinstance(video, list):  # PIL frames
        import numpy as np

        video = np.stack([np.asarray(f.convert("RGB")) for f in video])
    frames = torch.as_tensor(video)
    if frames.dtype != torch.uint8:
        raise ValueError(f"video frames must be uint8 [F, H, W, 3], got {frames.dtype}")
    return frames

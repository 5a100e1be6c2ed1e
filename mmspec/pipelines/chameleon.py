"""Text -> image with a Chameleon model folder (Lumina-mGPT, Anole): prompt -> Lumina-mGPT's instruction -> tokens
(mmspec.adapters.chameleon) -> pixels (its VQGAN, converted into the folder's vqgan/ by `mmspec convert chameleon-vq`).

The folder is transformers' Chameleon folder (config.json with its vocabulary_map, safetensors, tokenizer.json) with
`vqgan/` beside them; its config.json may say `"image_size": 768` (pixels; default: the VQGAN's own resolution).
"""
from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import torch

from mmspec.adapters.chameleon import DEFAULT_SAMPLING, ChameleonImage
from mmspec.api import generate
from mmspec.pipelines.base import DEFAULT_METHOD, DEFAULT_WINDOW, Pipeline, as_list
from mmspec.pipelines.grid import ImageOutput, read_json
from mmspec.pipelines.prompts import check_prompt
from mmspec.tokenizers.chameleon import VQGAN_FOLDER
from mmspec.tokenizers.pixels import chameleon_pixels
from mmspec.tokenizers.vq import VQTokenizer
from mmspec.window import WindowCache


def check_chameleon_folder(path: Path) -> None:
    """What a Chameleon folder needs besides its weights, checked before anything loads."""
    if not (path / VQGAN_FOLDER / "config.json").is_file():
        raise FileNotFoundError(f"{path} is a Chameleon model without its VQGAN (no {VQGAN_FOLDER}/config.json): convert "
                                f"Chameleon's vqgan.ckpt once with `mmspec convert chameleon-vq vqgan.ckpt "
                                f"{path / VQGAN_FOLDER} --config vqgan.yaml --allow-pickle`")
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{path} is a Chameleon model without its text tokenizer (tokenizer.json): copy "
                                "Chameleon's tokenizer.json (Lumina-mGPT: ckpts/chameleon/tokenizer/text_tokenizer.json) "
                                "into it")


class ChameleonPipeline(Pipeline):
    """prompt(s) -> PIL images; `num_outputs` images per prompt, at Lumina-mGPT's default sampling."""

    default_model = None  # (no bundled Chameleon: a folder is always named)
    # SJD-PAC's window on Lumina-mGPT-7B-768 (docs/usage.md): auto windows go up to it
    default_window = 64

    def __init__(self, target: ChameleonImage, tokenizer: VQTokenizer, image_size: int):
        super().__init__()
        self.target, self.tokenizer = target, tokenizer
        side = image_size // tokenizer.downsample
        self.layout = target.layout(side, side)
        self.default_sampling = dict(DEFAULT_SAMPLING)

    @classmethod
    def from_pretrained(cls, path: "str | Path", device="cpu", dtype=torch.float32,
                        window_cache: "WindowCache | str | Path | None" = None, compile: "bool | dict" = False):
        path = Path(path)
        check_chameleon_folder(path)
        tokenizer = VQTokenizer.from_pretrained(path / VQGAN_FOLDER, device=device, pixels=chameleon_pixels)
        config = read_json(path / "config.json", "model config")
        image_size = config.get("image_size", tokenizer.vq.config.sample_size)
        pipe = cls(ChameleonImage.from_pretrained(path, dtype=dtype, device=device), tokenizer, int(image_size))
        pipe.window_memory = WindowCache.coerce(window_cache).memories(path, device)
        pipe.folder, pipe.compile = path, compile
        return pipe

    @property
    def target_depth(self) -> int:
        return self.target.model.config.num_hidden_layers

    def _requests(self, prompts, **call) -> list[tuple]:
        return [(self.target, prompts, self.layout, None)]

    def __call__(self, prompt, num_outputs: int = 1, seed=0, method=DEFAULT_METHOD, window=DEFAULT_WINDOW,
                 sampling: "dict | None" = None, progress_bar: bool = False, image=None, mask=None,
                 on_commit=None, compile=None, batch_size: "int | None" = None):
        if image is not None or mask is not None:
            raise ValueError("a Chameleon model generates from text only here (no image= or mask=)")
        prompts = as_list(prompt)
        for p in prompts:
            check_prompt(p)
        rows = [p for p in prompts for _ in range(num_outputs)]
        started = time.perf_counter()
        method, policy = self._plan(method, window)
        self.check_call(prompts, len(rows), batch_size, method=method, window=policy, sampling=sampling)
        run = partial(generate, self.target, prompts, self.layout, seed=seed, num_outputs=num_outputs,
                      batch_size=batch_size)
        out, summary = self._generate(run, total=len(rows) * self.layout.length, method=method, policy=policy,
                                      sampling=sampling, progress_bar=progress_bar, on_commit=on_commit,
                                      started=started, compile=compile)
        images = self.tokenizer.decode_pil(self.target.codes_of(out.tokens, self.layout))
        return ImageOutput(images, rows, out.tokens, out.stats, summary)

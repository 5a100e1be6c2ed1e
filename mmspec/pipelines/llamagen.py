"""Class- and text-to-image with a LlamaGen folder: the GPT as `mmspec convert llamagen` writes it (config.json,
model.safetensors) and its VQ beside it in vq/, converted once with `mmspec convert llamagen-vq vq_ds16_c2i.pt
FOLDER/vq --allow-pickle` (a diffusers VQModel, its codebook L2-normalised as LlamaGen's lookup normalises it).

A prompt is what LlamaGen's sampling scripts condition on: a class label ("207") for class-to-image (sample_c2i.py),
a .safetensors file of FLAN-T5 features ("context" [120, 2048], optionally "context_mask") for text-to-image
(sample_t2i.py). CFG's null condition is the model's own (the null class, or the learned uncond_embedding); raw logits
are mixed, as LlamaGen's generate does.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from mmspec.adapters.reference import ReferenceTarget
from mmspec.layouts import Grid2D
from mmspec.pipelines.folders import read_features, read_json
from mmspec.pipelines.prompted import PromptedImagePipeline
from mmspec.reference.checkpoint import load_gpt
from mmspec.tokenizers.pixels import llamagen_pixels
from mmspec.tokenizers.vq import VQTokenizer
from mmspec.window import WindowCache

VQ_FOLDER = "vq"
# LlamaGen's sampling scripts' defaults: sample_c2i.py (CFG 4.0, top-k 2000), sample_t2i.py (CFG 7.5, top-k 1000)
DEFAULT_SAMPLING = {"c2i": {"temperature": 1.0, "top_k": 2000, "cfg_scale": 4.0},
                    "t2i": {"temperature": 1.0, "top_k": 1000, "cfg_scale": 7.5}}


class LlamaGenPipeline(PromptedImagePipeline):
    """class labels or T5 feature files -> PIL images of the GPT's square token grid through the folder's VQ."""

    default_window = 32  # (the docs' setting for LlamaGen: coupled at 32)

    def __init__(self, target: ReferenceTarget, tokenizer: VQTokenizer, default_sampling: dict):
        super().__init__()
        self.target, self.tokenizer, self.default_sampling = target, tokenizer, default_sampling
        config = target.model.config
        side = math.isqrt(config.block_size)
        if side * side != config.block_size:
            raise ValueError(f"a LlamaGen GPT generates a square grid; block_size {config.block_size} is not a square")
        self.layout = Grid2D(side, side)

    @classmethod
    def load_folder(cls, path: "str | Path", device="cpu", dtype=torch.float32,
                    window_cache: "WindowCache | str | Path | None" = None, compile: "bool | dict" = False):
        path = Path(path)
        if not (path / VQ_FOLDER / "config.json").is_file():
            raise FileNotFoundError(f"{path} is a LlamaGen GPT without its VQ (no {VQ_FOLDER}/config.json): convert "
                                    f"LlamaGen's VQ once with `mmspec convert llamagen-vq vq_ds16_c2i.pt "
                                    f"{path / VQ_FOLDER} --allow-pickle`")
        tokenizer = VQTokenizer.from_pretrained(path / VQ_FOLDER, device=device, pixels=llamagen_pixels)
        target = ReferenceTarget(load_gpt(path, dtype=dtype, device=device))
        kind = "c2i" if target.model.config.num_classes else "t2i"
        sampling = read_json(path / "config.json", "model config").get("default_sampling", DEFAULT_SAMPLING[kind])
        return cls(target, tokenizer, sampling)._at(path, device, window_cache, compile)

    @property
    def target_depth(self) -> int:
        return self.target.model.config.n_layer

    def condition(self, prompts: list[str]):
        """Class labels -> ids [C]; T5 feature files -> (features [C, T, C'], mask [C, T]) or features alone."""
        config = self.target.model.config
        if config.num_classes:
            labels = [p.strip() for p in prompts]
            bad = [p for p in labels if not (p.isdigit() and int(p) < config.num_classes)]
            if bad:
                raise ValueError(f"a LlamaGen class-to-image model takes class labels 0..{config.num_classes - 1} as "
                                 f"prompts, got {bad[0]!r}")
            return torch.tensor([int(p) for p in labels])
        read = [read_features(p) for p in prompts]  # (a text prompt: its one-line error names what to give)
        features = torch.stack([r[0] if isinstance(r, tuple) else r for r in read])
        features = features.reshape(len(read), config.cond_len, -1)  # [C, T, C']
        if all(isinstance(r, tuple) for r in read):
            return features, torch.stack([r[1] for r in read]).reshape(len(read), config.cond_len)
        return features

    def pictures(self, grid: torch.Tensor) -> list:
        """[B, h, w] VQ codes (-1: none yet, any picture there) -> PIL images: the VQ's decode, then LlamaGen's cast
        (`llamagen_pixels`)."""
        return self.tokenizer.decode_pil(grid.clamp(min=0))

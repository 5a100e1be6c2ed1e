"""Text -> image with a Chameleon model folder (Lumina-mGPT, Anole): prompt -> Lumina-mGPT's instruction -> tokens
(mmspec.adapters.chameleon) -> pixels (its VQGAN, converted into the folder's vqgan/ by `mmspec convert chameleon-vq`).

The folder is transformers' Chameleon folder (config.json with its vocabulary_map, safetensors, tokenizer.json) with
`vqgan/` beside them; its config.json may say `"image_size": 768` (pixels; default: the VQGAN's own resolution).
"""
from __future__ import annotations

from pathlib import Path

import torch

from mmspec.adapters.chameleon import DEFAULT_SAMPLING, ChameleonImage
from mmspec.pipelines.folders import read_json
from mmspec.pipelines.prompted import PromptedImagePipeline
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


class ChameleonPipeline(PromptedImagePipeline):
    """prompt(s) -> PIL images; `num_outputs` images per prompt, at Lumina-mGPT's default sampling."""

    # SJD-PAC's window on Lumina-mGPT-7B-768 (docs/usage.md): auto windows go up to it
    default_window = 64

    def __init__(self, target: ChameleonImage, tokenizer: VQTokenizer, image_size: int):
        super().__init__()
        self.target, self.tokenizer = target, tokenizer
        side = image_size // tokenizer.downsample
        self.layout = target.layout(side, side)
        self.default_sampling = dict(DEFAULT_SAMPLING)

    @classmethod
    def load_folder(cls, path: "str | Path", device="cpu", dtype=torch.float32,
                    window_cache: "WindowCache | str | Path | None" = None, compile: "bool | dict" = False):
        path = Path(path)
        check_chameleon_folder(path)
        tokenizer = VQTokenizer.from_pretrained(path / VQGAN_FOLDER, device=device, pixels=chameleon_pixels)
        config = read_json(path / "config.json", "model config")
        image_size = config.get("image_size", tokenizer.vq.config.sample_size)
        pipe = cls(ChameleonImage.from_pretrained(path, dtype=dtype, device=device), tokenizer, int(image_size))
        return pipe._at(path, device, window_cache, compile)

    @property
    def target_depth(self) -> int:
        return self.target.model.config.num_hidden_layers

    def condition(self, prompts: list[str]) -> list[str]:
        return prompts  # (the target builds Lumina-mGPT's instruction around them)

    def pictures(self, grid: torch.Tensor) -> list:
        """[B, h, w] image tokens (BPE ids; -1: none yet, any picture there) -> PIL images: their VQ codes through the
        folder's VQGAN."""
        codes = self.target.codes[grid.cpu().clamp(min=0)]  # (a cell not yet committed maps to no code: -1)
        return self.tokenizer.decode_pil(codes.clamp(min=0))

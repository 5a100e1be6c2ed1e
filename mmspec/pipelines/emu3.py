"""Text -> image with an Emu3 folder (transformers' `Emu3ForConditionalGeneration`, `Emu3-Gen-hf`): prompt -> the
prompt `Emu3Processor(text, return_for_image_generation=True)` makes -> image tokens with row ends (mmspec.adapters
.emu3: CFG against a negative prompt, visual tokens only) -> pixels (the model's VQ-VAE).

The image's size is the folder's config.json `image_size` (pixels a side, square; default 720, the processor's
default area of 518,400 pixels at ratio 1:1), a multiple of the VQ-VAE's downsampling (8: 90 x 90 tokens).
"""
from __future__ import annotations

from pathlib import Path

import torch

from mmspec.adapters.emu3 import Emu3Image
from mmspec.pipelines.folders import read_json
from mmspec.pipelines.prompted import PromptedImagePipeline, folder_tokenizer
from mmspec.tokenizers.pixels import emu3_pixels, to_pil
from mmspec.window import WindowCache

IMAGE_START, IMAGE_TOKEN = "<|image start|>", "<|image token|>"  # Emu3Processor's image_start_token, fake token
# the negative prompt of the transformers Emu3 docs and BAAI's Emu3 example: CFG's null condition
NEGATIVE_PROMPT = ("lowres, bad anatomy, bad hands, text, error, missing fingers, extra digit, fewer digits, "
                   "cropped, worst quality, low quality, normal quality, jpeg artifacts, signature, watermark, "
                   "username, blurry.")
# BAAI's Emu3 generation settings (docs/usage.md): CFG 3.0 on log-probabilities, top-k 2048
DEFAULT_SAMPLING = {"temperature": 1.0, "top_k": 2048, "cfg_scale": 3.0, "cfg_mode": "log_softmax"}
IMAGE_SIZE = 720  # pixels a side: Emu3Processor's default image_area (518,400) at ratio 1:1


class Emu3Pipeline(PromptedImagePipeline):
    """prompt(s) -> PIL images of image_size x image_size pixels."""

    default_window = 64  # (the docs' setting for Emu3: coupled at 64)

    def __init__(self, target: Emu3Image, tokenizer, image_size: int = IMAGE_SIZE):
        super().__init__()
        self.target, self.tokenizer = target, tokenizer
        down = target.model.model.vqmodel.spatial_scale_factor
        if image_size % down:
            raise ValueError(f"Emu3 image_size {image_size} must be a multiple of its VQ-VAE's {down} pixels a token")
        self.layout = target.layout(image_size // down, image_size // down)
        self.default_sampling = dict(DEFAULT_SAMPLING)

    @classmethod
    def load_folder(cls, path: "str | Path", device="cpu", dtype=torch.float32,
                    window_cache: "WindowCache | str | Path | None" = None, compile: "bool | dict" = False):
        path = Path(path)
        tokenizer = folder_tokenizer(path, "an Emu3 model", "copy the release's tokenizer files into it")
        config = read_json(path / "config.json", "model config")
        pipe = cls(Emu3Image.from_pretrained(path, dtype=dtype, device=device), tokenizer,
                   int(config.get("image_size", IMAGE_SIZE)))
        return pipe._at(path, device, window_cache, compile)

    @property
    def target_depth(self) -> int:
        return self.target.model.config.text_config.num_hidden_layers

    def condition(self, prompts: list[str]) -> dict:
        """Prompts -> {"prompt": ids, "negative_prompt": ids}: each prompt as Emu3Processor writes it for image
        generation (BOS, the text, then the image start and its size in tokens), the negative prompt as it writes
        text (BOS, the text)."""
        bos, h, w = self.tokenizer.bos_token or "", self.layout.h, self.layout.w
        ids = [self.tokenizer(f"{bos}{p}{IMAGE_START}{h}*{w}{IMAGE_TOKEN}").input_ids for p in prompts]
        return {"prompt": ids, "negative_prompt": [self.tokenizer(f"{bos}{NEGATIVE_PROMPT}").input_ids]}

    def pictures(self, grid: torch.Tensor) -> list:
        """[B, h, w] visual tokens (BPE ids; -1: none yet, any picture there) -> PIL images with the bytes Emu3's
        processor writes (`emu3_pixels` at the folder's settings, as Emu3Image.images): their VQ codes through the
        model's VQ-VAE, one image a call (an image's pixels depend on its tokens alone, whatever the batch)."""
        model = self.target.model.model
        codes = model.vocabulary_mapping.bpe2img_mapping_tensor[grid.cpu().clamp(min=0)].long()  # [B, h, w]
        device = self.target.visual_tokens.device
        with torch.no_grad():
            pixels = torch.cat([model.vqmodel.decode(c[None].to(device)) for c in codes])  # [B, 3, H, W] in [-1, 1]
        return to_pil(emu3_pixels(pixels.permute(0, 2, 3, 1), **self.target.processor))

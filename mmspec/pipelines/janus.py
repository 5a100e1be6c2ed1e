"""Text -> image with a Janus / Janus-Pro folder in transformers' layout (deepseek's release after `mmspec convert
janus`): prompt -> deepseek's generation turn + BOI (`janus_release.generation_prompt`), tokenized by the folder's
tokenizer -> image tokens (mmspec.adapters.janus: its CFG null prompt, the generation head) -> pixels (the model's VQ
decoder).
"""
from __future__ import annotations

from pathlib import Path

import torch

from mmspec.adapters.janus import JanusImage, janus_grid
from mmspec.adapters.janus_release import GUIDANCE, TEMPERATURE, generation_prompt
from mmspec.pipelines.prompted import PromptedImagePipeline, folder_tokenizer
from mmspec.window import WindowCache


def folder_config(path: Path):
    """A Janus folder's JanusConfig, read without its weights."""
    from transformers import JanusConfig

    return JanusConfig.from_pretrained(path, local_files_only=True)


def janus_sampling(generation_config) -> dict:
    """A Janus folder's default sampling: its generation config's CFG scale and temperature (`convert janus` writes
    deepseek's), else deepseek's own (generation_inference.py: CFG 5 on logits, temperature 1)."""
    scale, temperature = generation_config.guidance_scale, generation_config.temperature
    return {"temperature": TEMPERATURE if temperature is None else float(temperature),
            "cfg_scale": GUIDANCE if scale is None else float(scale), "cfg_mode": "logits"}


def janus_ids(tokenizer, prompts: list[str]) -> list[list[int]]:
    """Prompts -> ids as deepseek's `tokenizer.encode(prompt)` makes them of its generation prompt
    (`generation_prompt`; BOS added by the tokenizer), ending with BOI."""
    return [tokenizer(generation_prompt(p)).input_ids for p in prompts]


def shortest_prompt(tokenizer) -> int:
    """Tokens of the shortest generation prompt, an empty text's: the room every image leaves its prompt."""
    return len(janus_ids(tokenizer, [""])[0])


class JanusPipeline(PromptedImagePipeline):
    """prompt(s) -> PIL images of img_size x img_size pixels: deepseek's `img_size` (None: the model's own grid, 384 x
    384 pixels for Janus-Pro), its n x n tokens (`janus_grid`)."""

    default_window = 32  # (the docs' setting for Janus: coupled at 32)

    def __init__(self, target: JanusImage, tokenizer, img_size: "int | None" = None):
        super().__init__()
        self.target, self.tokenizer = target, tokenizer
        self.layout = target.layout(img_size=img_size, prompt=shortest_prompt(tokenizer))
        self.default_sampling = janus_sampling(target.model.generation_config)

    @classmethod
    def load_folder(cls, path: "str | Path", device="cpu", dtype=torch.float32,
                    window_cache: "WindowCache | str | Path | None" = None, compile: "bool | dict" = False,
                    img_size: "int | None" = None):
        """img_size: the images' side in pixels, as deepseek's `generate` takes it, checked against the folder's
        config before the weights load."""
        path = Path(path)
        tokenizer = folder_tokenizer(path, "a Janus model", "`mmspec convert janus` writes it; else copy the "
                                     "release's tokenizer files into it")
        if img_size is not None:
            janus_grid(folder_config(path), img_size, prompt=shortest_prompt(tokenizer))
        pipe = cls(JanusImage.from_pretrained(path, dtype=dtype, device=device), tokenizer, img_size)
        return pipe._at(path, device, window_cache, compile)

    @property
    def target_depth(self) -> int:
        return self.target.model.config.text_config.num_hidden_layers

    def condition(self, prompts: list[str]) -> list[list[int]]:
        """Prompts -> ids ending with BOI (`janus_ids`)."""
        return janus_ids(self.tokenizer, prompts)

    def pictures(self, grid: torch.Tensor) -> list:
        """[B, n, n] VQ codes (-1: none yet, any picture there) -> PIL images with the bytes deepseek's code writes for
        them (JanusImage.images), one image a decoder call: an image's pixels depend on its tokens alone, whatever
        the batch (render jobs)."""
        return [self.target.images(codes[None])[0] for codes in grid.clamp(min=0).flatten(1)]

"""Text -> image with a Janus / Janus-Pro folder in transformers' layout (deepseek's release after `mmspec convert
janus`): prompt -> deepseek's generation turn + BOI (`janus_prompt`), tokenized by the folder's tokenizer -> image
tokens (mmspec.adapters.janus: its CFG null prompt, the generation head) -> pixels (the model's VQ decoder).
"""
from __future__ import annotations

from pathlib import Path

import torch

from mmspec.adapters.janus import JanusImage
from mmspec.adapters.janus_release import BOI, GUIDANCE, TEMPERATURE
from mmspec.pipelines.prompted import PromptedImagePipeline, folder_tokenizer
from mmspec.window import WindowCache

# deepseek's "deepseek" conversation template (janus/utils/conversation.py) as generation_inference.py fills it: a
# user turn, an empty assistant turn, no system prompt
USER, ASSISTANT = "<|User|>", "<|Assistant|>"


def janus_prompt(text: str) -> str:
    """deepseek's image-generation prompt: the turn `apply_sft_template_for_multi_turn_prompts` makes of
    [{User: text}, {Assistant: ""}] with an empty system prompt, then `image_start_tag` (BOI)."""
    return f"{USER}: {text.strip()}\n\n{ASSISTANT}:{BOI}"


def janus_sampling(generation_config) -> dict:
    """A Janus folder's default sampling: its generation config's CFG scale and temperature (`convert janus` writes
    deepseek's), else deepseek's own (generation_inference.py: CFG 5 on logits, temperature 1)."""
    scale, temperature = generation_config.guidance_scale, generation_config.temperature
    return {"temperature": TEMPERATURE if temperature is None else float(temperature),
            "cfg_scale": GUIDANCE if scale is None else float(scale), "cfg_mode": "logits"}


class JanusPipeline(PromptedImagePipeline):
    """prompt(s) -> PIL images of the model's n x n grid (384 x 384 pixels for Janus-Pro)."""

    default_window = 32  # (the docs' setting for Janus: coupled at 32)

    def __init__(self, target: JanusImage, tokenizer):
        super().__init__()
        self.target, self.tokenizer = target, tokenizer
        self.layout = target.layout()
        self.default_sampling = janus_sampling(target.model.generation_config)

    @classmethod
    def load_folder(cls, path: "str | Path", device="cpu", dtype=torch.float32,
                    window_cache: "WindowCache | str | Path | None" = None, compile: "bool | dict" = False):
        path = Path(path)
        tokenizer = folder_tokenizer(path, "a Janus model", "`mmspec convert janus` writes it; else copy the "
                                     "release's tokenizer files into it")
        pipe = cls(JanusImage.from_pretrained(path, dtype=dtype, device=device), tokenizer)
        return pipe._at(path, device, window_cache, compile)

    @property
    def target_depth(self) -> int:
        return self.target.model.config.text_config.num_hidden_layers

    def condition(self, prompts: list[str]) -> list[list[int]]:
        """Prompts -> ids as deepseek's `tokenizer.encode(janus_prompt(text))` makes them (BOS added by the tokenizer),
        ending with BOI."""
        return [self.tokenizer(janus_prompt(p)).input_ids for p in prompts]

    def pictures(self, grid: torch.Tensor) -> list:
        """[B, n, n] VQ codes (-1: none yet, any picture there) -> PIL images with the bytes deepseek's code writes for
        them (JanusImage.images), one image a decoder call: an image's pixels depend on its tokens alone, whatever
        the batch (render jobs)."""
        return [self.target.images(codes[None])[0] for codes in grid.clamp(min=0).flatten(1)]

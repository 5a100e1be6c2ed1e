"""Janus (`JanusForConditionalGeneration`) image generation as an mmspec target.

The prompt is embedded by the text embeddings; each generated image token by the generation
embedding + aligner; logits come from the generation head on the language model's hidden states
(the LM head is not used). CFG is Hugging Face's: the unconditional prompt is the prompt with every
token that is neither BOS nor BOI replaced by the pad token, attended normally, and raw logits are
mixed, u + s (c - u) (use `cfg_mode="logits"`, the default). Tokens come out in raster order over
an n x n grid with no row-end tokens.
"""
from __future__ import annotations

from pathlib import Path

import torch

from mmspec.adapters.hf import HFSession
from mmspec.adapters.llama import LeanLlama
from mmspec.adapters.prompts import prompt_ids
from mmspec.layouts import Grid2D, Layout


class JanusImage:
    """Conditioned on prompt ids: a list of id lists or a [C, P] tensor, each ending with the BOI token
    (what `JanusProcessor(text=..., generation_mode="image")` makes)."""

    def __init__(self, model):
        self.model = model.eval()
        self.vocab_size = model.model.generation_head.vision_head.out_features
        gen = model.generation_config
        self.bos_token_id = gen.bos_token_id
        self.pad_token_id = gen.pad_token_id
        self.boi_token_id = (getattr(gen, "generation_kwargs", None) or {}).get("boi_token_id")
        self.lean = LeanLlama.of(model.model.language_model)  # its Llama decoder, lean (mmspec.adapters.llama)

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32, device="cpu"):
        from transformers import JanusForConditionalGeneration

        from mmspec.loading import load_pretrained

        return cls(load_pretrained(JanusForConditionalGeneration, path, "Janus", dtype, False, {"janus"}, device))

    @property
    def grid_size(self) -> int:
        """n of the n x n token grid the model generates."""
        tokens = self.model.model.vision_model.config.num_image_tokens
        n = int(round(tokens ** 0.5))
        return n if n * n == tokens else -1

    def layout(self) -> Grid2D:
        if self.grid_size < 0:
            raise ValueError(f"Janus num_image_tokens={self.model.model.vision_model.config.num_image_tokens} "
                             "is not a square number")
        return Grid2D(self.grid_size, self.grid_size)

    def encode(self, prompts) -> list[torch.Tensor]:
        out = prompt_ids(prompts, "Janus prompt")
        if self.boi_token_id is not None and any(int(p[-1]) != self.boi_token_id for p in out):
            raise ValueError(f"every Janus image prompt must end with the BOI token {self.boi_token_id} "
                             "(JanusProcessor(..., generation_mode='image') appends it)")
        return out

    def null_prompt(self, prompt: torch.Tensor) -> torch.Tensor:
        """Hugging Face's unconditional prompt: every token but BOS and BOI becomes the pad token."""
        missing = [name for name, v in (("generation_config.pad_token_id", self.pad_token_id),
                                        ("generation_config.bos_token_id", self.bos_token_id),
                                        ("generation_config.generation_kwargs['boi_token_id']", self.boi_token_id))
                   if v is None]
        if missing:
            raise ValueError(f"Janus CFG (cfg_scale != 1) builds the unconditional prompt from {', '.join(missing)}, "
                             "which the model's generation config does not set")
        keep = (prompt == self.bos_token_id) | (prompt == self.boi_token_id)
        return torch.where(keep, prompt, torch.full_like(prompt, self.pad_token_id))

    def session(self, condition, layout: Layout, *, cfg: bool, num_samples: int = 1, max_window: int = 1):
        expected = self.model.model.vision_model.config.num_image_tokens
        if not (isinstance(layout, Grid2D) and layout.row_end_token is None and not layout.end_tokens
                and layout.h == layout.w and layout.h * layout.w == expected):
            raise ValueError(f"this Janus model generates {expected} image tokens: use the layout "
                             f"Grid2D(n, n) with n * n == {expected} and no structural tokens "
                             f"(JanusImage.layout()), not {layout!r}")
        prompts = self.encode(condition)
        nulls = [self.null_prompt(p) for p in prompts] if cfg else None
        return _JanusSession(self.model, prompts, nulls, num_samples, embedding=self.model.get_input_embeddings(),
                             text_config=self.model.config.text_config, layout=layout, max_window=max_window,
                             vocab_size=self.vocab_size, pad_id=self.pad_token_id if self.pad_token_id is not None else 0,
                             lean=self.lean)

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """[B, N] image tokens -> [B, H, W, 3] pixels in [-1, 1] (the model's VQ decoder)."""
        device = self.model.get_input_embeddings().weight.device
        return self.model.decode_image_tokens(torch.as_tensor(tokens, dtype=torch.long, device=device))


class _JanusSession(HFSession):
    def __init__(self, model, *args, **kwargs):
        self.model, self.lm = model, model.model.language_model
        super().__init__(*args, **kwargs)

    def embed(self, tokens):
        return self.model.prepare_embeddings_for_image_generation(tokens)

    def logits(self, h, positions, view):
        hidden = (self.run(self.lm, h, positions, view).last_hidden_state if self.lean is None
                  else self.run_lean(h, positions, view))
        return self.model.model.generation_head(hidden)

"""Janus (`JanusForConditionalGeneration`) image generation as an mmspec target.

The prompt is embedded by the text embeddings; each generated image token by the generation
embedding + aligner; logits come from the generation head on the language model's hidden states
(the LM head is not used). CFG is Hugging Face's: the unconditional prompt is the prompt with every
token that is neither BOS nor BOI replaced by the pad token, attended normally, and raw logits are
mixed, u + s (c - u) (use `cfg_mode="logits"`, the default). Tokens come out in raster order over
an n x n grid with no row-end tokens.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from mmspec.adapters.hf import HFSession
from mmspec.adapters.llama import LeanLlama
from mmspec.adapters.prompts import prompt_ids
from mmspec.layouts import Grid2D, Layout
from mmspec.tokenizers.pixels import janus_pixels, to_pil


class JanusImage:
    """Conditioned on prompt ids: a list of id lists or a [C, P] tensor, each ending with the BOI token
    (what `JanusProcessor(text=..., generation_mode="image")` makes)."""

    def __init__(self, model):
        self.model = model.eval()
        self.vocab_size = model.model.generation_head.vision_head.out_features
        gen = model.generation_config
        self.bos_token_id = gen.bos_token_id
        self.pad_token_id = gen.pad_token_id
        self.boi_token_id = (getattr(gen, "generation_kwargs", None) or {}).get("boi_token_id",
                                                                               getattr(gen, "boi_token_id", None))
        self.lean = LeanLlama.of(model.model.language_model)  # its Llama decoder, lean (mmspec.adapters.llama)

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32, device="cpu"):
        """A transformers Janus folder. deepseek's own layout (`model_type: multi_modality`) is refused, naming
        `mmspec convert janus`; a BOI id that transformers dropped with its generation config's `generation_kwargs`
        is read from generation_config.json, and a folder without one is refused here, not at the first CFG call."""
        from transformers import JanusForConditionalGeneration

        from mmspec.adapters.janus_release import is_deepseek_janus
        from mmspec.loading import load_pretrained

        if is_deepseek_janus(path):
            raise ValueError(f"{path} is Janus in deepseek's layout (model_type 'multi_modality'); convert it once "
                             f"with `mmspec convert janus {path} OUT` and load OUT")
        target = cls(load_pretrained(JanusForConditionalGeneration, path, "Janus", dtype, False, {"janus"}, device))
        if target.boi_token_id is None:
            target.boi_token_id = _saved_boi(Path(path))
        return target

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

    def images(self, tokens: torch.Tensor) -> list:
        """[B, N] image tokens -> PIL images with the bytes deepseek's code writes for them (`janus_pixels`)."""
        return to_pil(janus_pixels(self.decode(tokens)))


def _saved_boi(path: Path) -> int:
    """The BOI id in a folder's generation_config.json (generation_kwargs.boi_token_id, or boi_token_id as
    transformers' conversion script writes it), which transformers drops on loading when the file says
    `_from_model_config: true`."""
    file = path / "generation_config.json"
    saved = json.loads(file.read_text()) if file.is_file() else {}
    boi = (saved.get("generation_kwargs") or {}).get("boi_token_id", saved.get("boi_token_id"))
    if boi is None:
        raise ValueError(f"{file} does not give Janus's BOI token id (generation_kwargs.boi_token_id), which image "
                         "prompts end with and CFG keeps: add it (\"generation_kwargs\": {\"boi_token_id\": ID}, "
                         "the tokenizer's <begin_of_image>) or convert the release with `mmspec convert janus`")
    return int(boi)


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

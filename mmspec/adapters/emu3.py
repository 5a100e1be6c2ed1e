"""Emu3 (`Emu3ForConditionalGeneration`) image generation as an mmspec target.

Emu3 writes an h x w image as h rows of w visual BPE tokens, each row closed by an end-of-line
token (EOL, `<|extra_200|>`), then end-of-frame (EOF, `<|extra_201|>`), end-of-image (EOI,
`<|image end|>`) and EOS. mmspec's `Grid2D(h, w, row_end_token=EOL, end_tokens=(EOF, EOI, EOS))`
makes those structural (forced, never drafted); `emu3_layout` builds it from the model's vocabulary.

CFG follows transformers' `UnbatchedClassifierFreeGuidanceLogitsProcessor`: the null condition is a
negative prompt run as its own sequence, and log-probabilities are mixed, lu + s (lc - lu) (use
`cfg_mode="log_softmax"`; log-softmax shifts each row by a constant, so raw-logit mixing gives the
same p up to rounding). Free positions are restricted to visual tokens, as the
`prefix_allowed_tokens_fn` of the Emu3 docs does after CFG: the session sets every other logit to
-1e9 in both halves, which changes the mixed log-probabilities of visual tokens only by a constant
per position (so p is the same as masking after mixing) and keeps the rest at probability zero under
either CFG rule (a finite value: -inf - -inf would be NaN).
"""
from __future__ import annotations

from pathlib import Path

import torch

from mmspec.adapters.hf import AllowedTokensSession, decoder_shape
from mmspec.adapters.prompts import prompt_ids
from mmspec.layouts import Grid2D, Layout
from mmspec.memory import Shape
from mmspec.tokenizers.pixels import EMU3_PROCESSOR, emu3_pixels, emu3_processor, to_pil

EOL_NAME, EOF_NAME, EOI_NAME = "<|extra_200|>", "<|extra_201|>", "<|image end|>"


def emu3_tokens(model, eoi_token_id: int | None = None, eos_token_id: int | None = None) -> dict[str, int]:
    """The structural token ids of an Emu3 model: EOL and EOF from its vocabulary map, EOI from the map
    (`<|image end|>`) unless given, EOS from its text config unless given."""
    vocab = model.vocabulary_mapping.vocab_map or {}
    eos = eos_token_id if eos_token_id is not None else model.config.text_config.eos_token_id
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    ids = {"EOL": vocab.get(EOL_NAME), "EOF": vocab.get(EOF_NAME),
           "EOI": eoi_token_id if eoi_token_id is not None else vocab.get(EOI_NAME), "EOS": eos}
    missing = [name for name, v in ids.items() if v is None]
    if missing:
        raise ValueError(f"the Emu3 model does not define the token(s) {missing}: its vocabulary_map needs "
                         f"{EOL_NAME!r} (EOL), {EOF_NAME!r} (EOF) and {EOI_NAME!r} (EOI, or pass eoi_token_id), and "
                         "its text config an eos_token_id (or pass eos_token_id)")
    return ids


def emu3_layout(model, height: int, width: int, eoi_token_id: int | None = None,
                eos_token_id: int | None = None) -> Grid2D:
    """Grid2D(h, w, row_end_token=EOL, end_tokens=(EOF, EOI, EOS)): h (w + 1) + 3 tokens, as Emu3 writes them."""
    t = emu3_tokens(model, eoi_token_id, eos_token_id)
    return Grid2D(height, width, row_end_token=t["EOL"], end_tokens=(t["EOF"], t["EOI"], t["EOS"]))


class Emu3Image:
    """Conditioned on prompt ids (a list of id lists or a [C, P] tensor, as `Emu3Processor(...,
    return_for_image_generation=True)` makes them, ending with `<|image token|>`), or, for CFG, on
    `{"prompt": ids, "negative_prompt": ids}` with one negative prompt per prompt or a single one for all.
    Negative prompts may be longer or shorter than the prompts."""

    def __init__(self, model, eoi_token_id: int | None = None, eos_token_id: int | None = None):
        self.model = model.eval()
        self.vocab_size = model.lm_head.out_features
        self.eoi_token_id, self.eos_token_id = eoi_token_id, eos_token_id
        visual = model.vocabulary_mapping.image_tokens
        if not visual:
            raise ValueError("the Emu3 model's vocabulary_map has no '<|visual token...|>' entries")
        device = model.get_input_embeddings().weight.device
        self.visual_tokens = torch.tensor(visual, dtype=torch.long, device=device)
        self.allowed = torch.zeros(self.vocab_size, dtype=torch.bool, device=device)
        self.allowed[self.visual_tokens] = True
        self.processor = dict(EMU3_PROCESSOR)  # the image processor's postprocessing settings (emu3_pixels')

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32, device="cpu", **tokens):
        """A transformers Emu3 folder; its preprocessor_config.json, where it has one, gives the pictures' cast."""
        from transformers import Emu3ForConditionalGeneration

        from mmspec.loading import load_pretrained

        target = cls(load_pretrained(Emu3ForConditionalGeneration, path, "Emu3", dtype, False, {"emu3"}, device),
                     **tokens)
        target.processor = emu3_processor(path)
        return target

    def layout(self, height: int, width: int) -> Grid2D:
        return emu3_layout(self.model, height, width, self.eoi_token_id, self.eos_token_id)

    @staticmethod
    def _ids(prompts, what: str) -> list[torch.Tensor]:
        return prompt_ids(prompts, f"Emu3 {what}")

    def encode(self, condition) -> tuple[list[torch.Tensor], list[torch.Tensor] | None]:
        """condition -> (prompts, negative prompts or None), one negative prompt per prompt."""
        negative = None
        if isinstance(condition, dict):
            unknown = set(condition) - {"prompt", "negative_prompt"}
            if unknown or "prompt" not in condition:
                raise ValueError(f"an Emu3 condition dict has keys 'prompt' and optionally 'negative_prompt', "
                                 f"got {sorted(condition)}")
            negative = condition.get("negative_prompt")
            condition = condition["prompt"]
        prompts = self._ids(condition, "prompt")
        if negative is not None:
            negative = self._ids(negative, "negative prompt")
            if len(negative) == 1:
                negative = negative * len(prompts)
            if len(negative) != len(prompts):
                raise ValueError(f"got {len(negative)} negative prompts for {len(prompts)} prompts; "
                                 "give one per prompt or a single one")
        return prompts, negative

    def memory_shape(self, condition, layout: Layout) -> Shape:
        """The text model's sizes and the longest of the prompts and negative prompts (all are left-padded to it)."""
        prompts, negative = self.encode(condition)
        embedding = self.model.get_input_embeddings().weight
        return decoder_shape(self.model.config.text_config, self.vocab_size,
                             max(len(p) for p in prompts + (negative or [])), embedding.element_size())

    def session(self, condition, layout: Layout, *, cfg: bool, num_samples: int = 1, max_window: int = 1):
        if not isinstance(layout, Grid2D):
            raise ValueError(f"Emu3 generates a Grid2D image, not {layout!r}")
        expected = self.layout(layout.h, layout.w)
        if (layout.row_end_token, layout.end_tokens) != (expected.row_end_token, expected.end_tokens):
            raise ValueError(f"Emu3 writes an image as {expected!r}: use Emu3Image.layout(h, w), not {layout!r}")
        prompts, negative = self.encode(condition)
        if cfg and negative is None:
            raise ValueError("Emu3 CFG (cfg_scale != 1) needs a negative prompt as its null condition: pass "
                             "{'prompt': ids, 'negative_prompt': ids} (transformers falls back to the prompt's last "
                             "token alone when negative_prompt_ids is missing; pass that explicitly to match it)")
        pad = self.model.config.text_config.pad_token_id
        return AllowedTokensSession(self.model, self.model.model.text_model, self.allowed, prompts,
                                    negative if cfg else None, num_samples, embedding=self.model.get_input_embeddings(),
                                    text_config=self.model.config.text_config, layout=layout, max_window=max_window,
                                    vocab_size=self.vocab_size, pad_id=0 if pad is None else pad,
                                    draft_vocab=self.visual_tokens)  # random drafts only where they can be accepted

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """[B, h (w + 1) + 3] generated tokens -> [B, 3, H, W] pixels (the model's VQ-VAE)."""
        device = self.model.get_input_embeddings().weight.device
        tokens = torch.as_tensor(tokens, dtype=torch.long, device=device)
        return self.model.decode_image_tokens(image_tokens=tokens, height=height, width=width)

    def images(self, tokens: torch.Tensor, height: int, width: int) -> list:
        """[B, h (w + 1) + 3] generated tokens -> PIL images with the bytes Emu3's processor writes (`emu3_pixels`)."""
        return to_pil(emu3_pixels(self.decode(tokens, height, width).permute(0, 2, 3, 1), **self.processor))

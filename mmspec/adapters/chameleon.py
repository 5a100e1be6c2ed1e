"""Chameleon image generation (Lumina-mGPT, Anole: `ChameleonForConditionalGeneration` weights) as an mmspec target.

Lumina-mGPT writes an image of h x w VQ tokens (16 pixels each) as `<racm3:break>` (BOI), two resolution tokens
`<reserved{8800 + n}>` for h / 2 and w / 2 (n counts 32-pixel patches), then h rows of w image tokens each closed by
`<reserved08799>` (a row end), then `<eoss>` (EOI). mmspec conditions on the prompt up to and including BOI and the
two resolution tokens (`prompt_ids` builds it from text as Lumina-mGPT's item processor does: BOS, "Generate an
image of WxH according to the following prompt:\\n" + text + the turn separator `<reserved08706>`), and generates the
rest as `Grid2D(h, w, row_end_token=row end, end_tokens=(EOI,))`, whose row ends and EOI are structural (forced).

CFG follows Lumina-mGPT's inference solver: the unconditional sequence is the image part alone, from BOI on
(`[BOI, res_h, res_w]` then the same image tokens), and raw logits are mixed, u + s (c - u) (`cfg_mode="logits"`).
Free positions may only take image tokens (the `IMGIMG...` entries of the vocabulary map): the session sets every
other logit to -1e9 in both halves, which leaves the mixed logits of image tokens as they are and keeps the rest at
probability zero, as masking after the mix does. Lumina-mGPT then keeps the top k image tokens (its default
2000, CFG 3.0). It divides by the temperature before the CFG mix and mmspec after: the two agree at temperature 1,
Lumina-mGPT's setting. transformers' own `forward` sets every image token's logit to the lowest value (Chameleon as
Meta released it generates no images); the session computes logits from the decoder and `lm_head` itself.
"""
from __future__ import annotations

from pathlib import Path

import torch

from mmspec.adapters.hf import AllowedTokensSession, decoder_shape
from mmspec.adapters.prompts import prompt_ids
from mmspec.layouts import Grid2D, Layout
from mmspec.memory import Shape

BOI_NAME, EOI_NAME, ROW_END_NAME, SEP_NAME = "<racm3:break>", "<eoss>", "<reserved08799>", "<reserved08706>"
PATCH = 16  # pixels per VQ token side; a resolution token counts 2 x 2 tokens (32 pixels)
# Lumina-mGPT's default image sampling (inference_solver.py: create_logits_processor; generate.py)
DEFAULT_SAMPLING = {"temperature": 1.0, "top_k": 2000, "cfg_scale": 3.0, "cfg_mode": "logits"}


def resolution_name(n: int) -> str:
    """The resolution token for n 32-pixel patches."""
    return f"<reserved{8800 + n:05d}>"


def instruction(text: str, height: int, width: int) -> str:
    """Lumina-mGPT's image generation turn for an h x w token image (16 pixels a token), with its separator."""
    return f"Generate an image of {width * PATCH}x{height * PATCH} according to the following prompt:\n{text}{SEP_NAME}"


class ChameleonImage:
    """Conditioned on prompts: strings (with a tokenizer: Lumina-mGPT's instruction is built around them), or id
    lists / a [C, P] tensor of the text part (BOS ... separator); `session` appends BOI and the resolution tokens."""

    def __init__(self, model, tokenizer=None):
        self.model, self.tokenizer = model.eval(), tokenizer
        vocab = model.config.vocabulary_map or {}
        missing = [n for n in (BOI_NAME, EOI_NAME, ROW_END_NAME) if n not in vocab]
        if missing:
            raise ValueError(f"the Chameleon config's vocabulary_map lacks {missing}: Lumina-mGPT and Anole write images "
                             f"with {BOI_NAME!r}, {ROW_END_NAME!r} and {EOI_NAME!r}")
        self.vocab = vocab
        self.boi, self.eoi, self.row_end = vocab[BOI_NAME], vocab[EOI_NAME], vocab[ROW_END_NAME]
        mapping = model.model.vocabulary_mapping
        if not mapping.image_tokens:
            raise ValueError("the Chameleon config's vocabulary_map has no image tokens ('IMGIMG...' entries)")
        device = model.get_input_embeddings().weight.device
        self.vocab_size = model.lm_head.out_features
        self.image_tokens = torch.tensor(mapping.image_tokens, device=device)  # BPE ids of the VQ codes
        self.allowed = torch.zeros(self.vocab_size, dtype=torch.bool, device=device)
        self.allowed[self.image_tokens] = True
        bpe2img = mapping.bpe2img
        self.codes = torch.full((self.vocab_size,), -1, dtype=torch.long)  # BPE id -> VQ code, -1 elsewhere
        self.codes[torch.tensor(list(bpe2img))] = torch.tensor(list(bpe2img.values()))

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32, device="cpu"):
        """A Chameleon folder as transformers, Anole or Lumina-mGPT (its q/k norms a row per model-parallel shard:
        mmspec.adapters.chameleon_release) write it, with its text tokenizer where the folder has one. Its VQ
        encoder (`model.vqmodel`) may be absent: generation does not run it."""
        from transformers import ChameleonForConditionalGeneration

        from mmspec.adapters.chameleon_release import per_head_norms
        from mmspec.loading import load_pretrained

        model = load_pretrained(ChameleonForConditionalGeneration, path, "Chameleon", dtype, False, {"chameleon"},
                                device, optional=("model.vqmodel.",), released=per_head_norms)
        return cls(model, text_tokenizer(Path(path)))

    def layout(self, height: int, width: int) -> Grid2D:
        """h x w VQ tokens (16 pixels each; even, as the resolution tokens count 32-pixel patches)."""
        if height % 2 or width % 2:
            raise ValueError(f"Chameleon images are h x w tokens with h, w even (32-pixel patches), got {height} x {width}")
        missing = [resolution_name(n) for n in (height // 2, width // 2) if resolution_name(n) not in self.vocab]
        if missing:
            raise ValueError(f"a {height} x {width} token image needs the resolution tokens {missing}, which the "
                             "vocabulary_map lacks")
        return Grid2D(height, width, row_end_token=self.row_end, end_tokens=(self.eoi,))

    def image_start(self, layout: Grid2D) -> list[int]:
        """BOI and the two resolution tokens that open an image of the layout's size."""
        return [self.boi, self.vocab[resolution_name(layout.h // 2)], self.vocab[resolution_name(layout.w // 2)]]

    def prompt_ids(self, prompts, layout: Grid2D) -> list[torch.Tensor]:
        """Prompts (strings, or ids of the text part) -> ids ending with the image start."""
        if isinstance(prompts, str) or (isinstance(prompts, (list, tuple)) and prompts and isinstance(prompts[0], str)):
            if self.tokenizer is None:
                raise ValueError("string prompts need the model's text tokenizer (tokenizer.json in its folder)")
            texts = [prompts] if isinstance(prompts, str) else list(prompts)
            bos = self.model.config.bos_token_id
            prompts = [[bos] + self.tokenizer(instruction(t, layout.h, layout.w), add_special_tokens=False).input_ids
                       for t in texts]
        start = torch.tensor(self.image_start(layout))
        return [torch.cat([p, start]) for p in prompt_ids(prompts, "Chameleon prompt")]

    def memory_shape(self, condition, layout: Grid2D) -> Shape:
        """The decoder's sizes and the longest prompt's tokens with the image start (CFG's null prompts, the image
        start alone, are left-padded to it)."""
        embedding = self.model.get_input_embeddings().weight
        longest = max(len(p) for p in self.prompt_ids(condition, layout))
        return decoder_shape(self.model.config, self.vocab_size, longest, embedding.element_size())

    def session(self, condition, layout: Layout, *, cfg: bool, num_samples: int = 1, max_window: int = 1):
        if not isinstance(layout, Grid2D) or (layout.row_end_token, layout.end_tokens) != (self.row_end, (self.eoi,)):
            raise ValueError(f"Chameleon writes an image as Grid2D(h, w, row_end_token={self.row_end}, "
                             f"end_tokens=({self.eoi},)): use ChameleonImage.layout(h, w), not {layout!r}")
        self.layout(layout.h, layout.w)  # (even sides, known resolution tokens)
        prompts = self.prompt_ids(condition, layout)
        nulls = [torch.tensor(self.image_start(layout))] * len(prompts) if cfg else None
        pad = self.model.config.pad_token_id
        return AllowedTokensSession(self.model, self.model.model, self.allowed, prompts, nulls, num_samples,
                                    embedding=self.model.get_input_embeddings(), text_config=self.model.config,
                                    layout=layout, max_window=max_window, vocab_size=self.vocab_size,
                                    pad_id=0 if pad is None else pad, draft_vocab=self.image_tokens)

    def codes_of(self, tokens: torch.Tensor, layout: Grid2D) -> torch.Tensor:
        """Generated tokens [B, h (w + 1) + 1] -> VQ codes [B, h, w] (row ends and EOI dropped, BPE ids mapped)."""
        grid = torch.as_tensor(tokens).cpu().view(-1, layout.h * (layout.w + 1) + 1)[:, :-1]
        codes = self.codes[grid.view(-1, layout.h, layout.w + 1)[..., :-1]]
        if (codes < 0).any():
            raise ValueError("the tokens hold ids that are no image tokens where the grid's cells are")
        return codes


def text_tokenizer(path: Path):
    """The folder's text tokenizer (tokenizer.json, as transformers writes Chameleon's), or None."""
    if not (path / "tokenizer.json").is_file():
        return None
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)

"""Janus (`JanusForConditionalGeneration`) image generation as an mmspec target.

The prompt is embedded by the text embeddings; each generated image token by the generation
embedding + aligner; logits come from the generation head on the language model's hidden states
(the LM head is not used). CFG is deepseek's (generation_inference.py): the unconditional prompt is
the prompt with every token between its first and its last replaced by the pad token (by position:
transformers' Janus keeps BOS and BOI by id wherever they sit, which differs when BOI sits in the text
or BOS is not first), attended normally, and raw logits are mixed, u + s (c - u) (use
`cfg_mode="logits"`, the default). Tokens come out in raster order over an n x n grid with no row-end
tokens; n is deepseek's `img_size // patch_size` (`layout`).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from mmspec.adapters.hf import HFSession, decoder_shape
from mmspec.adapters.llama import LeanLlama
from mmspec.adapters.prompts import prompt_ids
from mmspec.layouts import Grid2D, Layout
from mmspec.memory import Shape
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
    def patch_size(self) -> int:
        """Pixels a token's side: the VQ decoder's upsampling (deepseek's `patch_size`, 16 in its releases)."""
        return patch_size(self.model.config)

    def layout(self, img_size: "int | None" = None, image_token_num_per_image: "int | None" = None,
               prompt: int = 1) -> Grid2D:
        """The n x n token grid of an image, with the options of deepseek's `generate`, after a prompt of at least
        `prompt` tokens (`janus_grid`)."""
        return janus_grid(self.model.config, img_size, image_token_num_per_image, prompt)

    def encode(self, prompts) -> list[torch.Tensor]:
        out = prompt_ids(prompts, "Janus prompt")
        if self.boi_token_id is not None and any(int(p[-1]) != self.boi_token_id for p in out):
            raise ValueError(f"every Janus image prompt must end with the BOI token {self.boi_token_id} "
                             "(JanusProcessor(..., generation_mode='image') appends it)")
        return out

    def null_prompt(self, prompt: torch.Tensor) -> torch.Tensor:
        """deepseek's unconditional prompt (`deepseek_null_prompt`), with the model's pad token."""
        if self.pad_token_id is None:
            raise ValueError("Janus CFG (cfg_scale != 1) pads the unconditional prompt with "
                             "generation_config.pad_token_id, which the model's generation config does not set")
        return deepseek_null_prompt(prompt, self.pad_token_id)

    def fitted(self, condition, layout: Layout) -> list[torch.Tensor]:
        """`encode`, and a prompt whose tokens and the image's do not fit in the model's positions refused in one line
        naming the sizes that do after it (`janus_fits`)."""
        prompts = self.encode(condition)
        janus_fits(self.model.config, max(len(p) for p in prompts), layout)
        return prompts

    def memory_shape(self, condition, layout: Layout) -> Shape:
        """The language model's sizes and the longest prompt's tokens (CFG's null prompts have each its prompt's
        length; all are left-padded to the longest); logits are the generation head's. A request whose prompt and
        image do not fit in the model's positions is refused here, before any work (`fitted`)."""
        embedding = self.model.get_input_embeddings().weight
        return decoder_shape(self.model.config.text_config, self.vocab_size,
                             max(len(p) for p in self.fitted(condition, layout)), embedding.element_size())

    def session(self, condition, layout: Layout, *, cfg: bool, num_samples: int = 1, max_window: int = 1):
        if not (isinstance(layout, Grid2D) and layout.row_end_token is None and not layout.end_tokens
                and layout.h == layout.w):
            raise ValueError(f"Janus generates an n x n grid of image tokens with no structural tokens: use "
                             f"JanusImage.layout(img_size=...), not {layout!r}")
        prompts = self.fitted(condition, layout)
        nulls = [self.null_prompt(p) for p in prompts] if cfg else None
        return _JanusSession(self.model, prompts, nulls, num_samples, embedding=self.model.get_input_embeddings(),
                             text_config=self.model.config.text_config, layout=layout, max_window=max_window,
                             vocab_size=self.vocab_size, pad_id=self.pad_token_id if self.pad_token_id is not None else 0,
                             lean=self.lean)

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """[B, n * n] image tokens -> [B, H, W, 3] pixels in [-1, 1] (the model's VQ decoder), at any n, as deepseek's
        `decode_code(tokens, shape=[B, 8, n, n])` (transformers' `decode_image_tokens` takes its config's n only)."""
        vq = self.model.model.vqmodel
        tokens = torch.as_tensor(tokens, dtype=torch.long, device=vq.quantize.embedding.weight.device)
        B, N = tokens.shape
        n = int(round(N ** 0.5))
        if n * n != N:
            raise ValueError(f"Janus decodes an n x n grid of tokens, got {N} a row")
        codes = F.normalize(vq.quantize.embedding(tokens), p=2, dim=-1)  # [B, N, D] (the codebook is L2-normalised)
        grid = codes.view(B, n, n, -1).permute(0, 3, 1, 2).contiguous()  # [B, D, n, n]
        pixels = vq.decoder(vq.post_quant_conv(grid))  # [B, 3, H, W]
        return pixels.permute(0, 2, 3, 1)

    def images(self, tokens: torch.Tensor) -> list:
        """[B, N] image tokens -> PIL images with the bytes deepseek's code writes for them (`janus_pixels`)."""
        return to_pil(janus_pixels(self.decode(tokens)))


def patch_size(config) -> int:
    """Pixels a token's side of a JanusConfig's VQ decoder: it upsamples by 2 at every level but the last."""
    return 2 ** (len(config.vq_config.channel_multiplier) - 1)


def janus_grid(config, img_size: "int | None" = None, image_token_num_per_image: "int | None" = None,
               prompt: int = 1) -> Grid2D:
    """The n x n token grid of an image of a JanusConfig's model, with the options of deepseek's `generate`
    (generation_inference.py): `img_size`, pixels a side, n = img_size // patch_size (its decoder's
    `decode_code(shape=[B, 8, n, n])`), and `image_token_num_per_image`, the tokens drawn, n * n; they must agree when
    both are given; neither: the model's own (num_image_tokens: 576, 384 pixels, in deepseek's releases). A size the
    model cannot make gets one line naming those it can: n from 1 to the side whose n * n tokens its positions
    (max_position_embeddings) hold after a prompt of `prompt` tokens, the fewest its prompts have (1: the BOI token
    alone; a pipeline's generation prompt around an empty text)."""
    patch = patch_size(config)
    largest = _largest_side(config, prompt)
    sizes = (f"this Janus model makes square images of n x n tokens of {patch} pixels, n from 1 to {largest} (a "
             f"prompt of {prompt}+ tokens, then n * n, within its {config.text_config.max_position_embeddings} "
             f"positions): img_size {patch}, {2 * patch}, ..., {largest * patch}, image_token_num_per_image 1, 4, "
             f"..., {largest * largest}")
    tokens = image_token_num_per_image
    if img_size is not None:
        if isinstance(img_size, bool) or not isinstance(img_size, int) or img_size % patch \
                or not 1 <= img_size // patch <= largest:
            raise ValueError(f"img_size {img_size!r}: {sizes}")
        n = img_size // patch
        if tokens is not None and tokens != n * n:
            raise ValueError(f"image_token_num_per_image {tokens} is not (img_size // {patch})^2 = {n * n}: deepseek's "
                             f"decoder reshapes the tokens to {n} x {n}")
        return Grid2D(n, n)
    if tokens is None:
        tokens = config.vision_config.num_image_tokens
    n = math.isqrt(tokens) if isinstance(tokens, int) and tokens > 0 else 0
    if n * n != tokens or not 1 <= n <= largest:
        raise ValueError(f"image_token_num_per_image {tokens!r}: {sizes}")
    return Grid2D(n, n)


def janus_fits(config, prompt: int, layout: Layout) -> None:
    """Refuse in one line an image whose tokens do not fit in the model's positions after a prompt of `prompt`
    tokens, naming the largest img_size that does."""
    positions = config.text_config.max_position_embeddings
    if prompt + layout.length > positions:
        n = _largest_side(config, prompt)
        smaller = f", or img_size at most {n * patch_size(config)} (image_token_num_per_image {n * n}) after it"
        smaller = smaller if n > 0 else ""
        raise ValueError(f"a prompt of {prompt} tokens and an image of {layout.length} tokens take "
                         f"{prompt + layout.length} positions, more than this Janus model's {positions}: a shorter "
                         f"prompt{smaller}")


def _largest_side(config, prompt: int) -> int:
    """The largest n whose n * n image tokens fit in the model's positions after a prompt of `prompt` tokens."""
    return math.isqrt(max(0, config.text_config.max_position_embeddings - prompt))


def deepseek_null_prompt(prompt: torch.Tensor, pad_id: int) -> torch.Tensor:
    """deepseek's unconditional prompt (generation_inference.py: `tokens[i, 1:-1] = pad_id`): every token between
    the first and the last becomes the pad token, by position, whatever the ids. prompt [P] -> [P]."""
    null = torch.full_like(prompt, pad_id)
    null[0], null[-1] = prompt[0], prompt[-1]
    return null


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

"""Run transformers decoders on mmspec's static KV cache.

transformers caches keep one length for the whole batch; speculation needs one per row. mmspec
registers an attention function ("mmspec") that writes keys/values at each row's own slots of a
StaticKVCache and masks by slot, and switches a model to it only for the duration of a call.
Everything else (RoPE from explicit position_ids, MLPs, norms) is the model's own code.
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, PretrainedConfig

from mmspec.adapters.base import PrefixSession
from mmspec.adapters.llama import LeanLlama
from mmspec.adapters.prompts import left_pad
from mmspec.cache import CacheView, StaticKVCache, session_slots
from mmspec.layouts import Layout
from mmspec.memory import Shape

ATTENTION = "mmspec"


def mmspec_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, *,
                     mmspec_view: CacheView, **kwargs):
    """query [B, H, T, D], key/value [B, Hkv, T, D] (RoPE applied) -> [B, T, H, D]."""
    k, v = mmspec_view.update(module.layer_idx, key, value)
    if k.shape[1] != query.shape[1]:
        k = k.repeat_interleave(query.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(query.shape[1] // v.shape[1], dim=1)
    out = F.scaled_dot_product_attention(query, k.to(query.dtype), v.to(query.dtype),
                                         attn_mask=mmspec_view.bias(query.dtype), scale=scaling)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, mmspec_attention)


_CONFIGS: "weakref.WeakKeyDictionary[torch.nn.Module, list[PretrainedConfig]]" = weakref.WeakKeyDictionary()


@contextmanager
def cached_attention(model: torch.nn.Module):
    """Within the block, every attention layer of `model` uses mmspec_attention."""
    configs = _CONFIGS.get(model)
    if configs is None:  # walking the modules costs more than a small model's attention: once per model
        found = {id(m.config): m.config for m in model.modules() if isinstance(getattr(m, "config", None), PretrainedConfig)}
        configs = _CONFIGS[model] = list(found.values())
    saved = [cfg._attn_implementation_internal for cfg in configs]
    try:
        for cfg in configs:
            cfg._attn_implementation_internal = ATTENTION
        yield
    finally:
        for cfg, value in zip(configs, saved):
            cfg._attn_implementation_internal = value


def new_cache(text_config: PretrainedConfig, batch: int, max_len: int, dtype, device) -> StaticKVCache:
    shape = decoder_shape(text_config, 0, 0, 0)
    return StaticKVCache(shape.layers, batch, shape.kv_heads, max_len, shape.head_dim, dtype=dtype, device=device)


def decoder_shape(text_config: PretrainedConfig, vocab: int, prefix: int, element: int) -> Shape:
    """A transformers decoder's sizes, as `new_cache` allocates its cache, for mmspec.memory's estimate."""
    heads = text_config.num_attention_heads
    return Shape(layers=text_config.num_hidden_layers, heads=heads,
                 kv_heads=getattr(text_config, "num_key_value_heads", None) or heads,
                 head_dim=getattr(text_config, "head_dim", None) or text_config.hidden_size // heads,
                 dim=text_config.hidden_size, vocab=vocab, prefix=prefix, element=element)


class HFSession(PrefixSession):
    """A PrefixSession over a transformers decoder, opened on prompts (and null prompts for CFG).

    The prompts [C] are repeated per sample (row r is sample r % num_samples of prompt r //
    num_samples), the null prompts make the second half of the batch, all are left-padded with
    `pad_id`, embedded by `embedding` and prefilled. Subclasses set what `embed` / `logits` need
    before calling this constructor, which runs the prefill. `prompt_in_vocab`: the prompt ids are
    ids of the vocabulary being generated (text), so n-gram lookup may draft from them; `draft_vocab`:
    the ids random drafts should come from.
    """

    def __init__(self, prompts: list[torch.Tensor], null_prompts: list[torch.Tensor] | None, num_samples: int, *,
                 embedding: torch.nn.Module, text_config: PretrainedConfig, layout: Layout, max_window: int,
                 vocab_size: int, pad_id: int = 0, prompt_in_vocab: bool = False,
                 draft_vocab: torch.Tensor | None = None, lean: "LeanLlama | None" = None):
        self.lean = lean  # a lean forward of the session's decoder (mmspec.adapters.llama), where it has one
        rows = [p for p in prompts for _ in range(num_samples)]
        batch_size = len(rows)
        if null_prompts is not None:
            rows += [p for p in null_prompts for _ in range(num_samples)]
        ids, lengths = left_pad(rows, pad_id)
        self.max_positions = getattr(text_config, "max_position_embeddings", None)
        longest, N = int(lengths.max()), layout.length
        if self.max_positions is not None and longest + N > self.max_positions:
            raise ValueError(f"a prompt of {longest} tokens + {N} new tokens = {longest + N} positions, more than "
                             f"the model's context of {self.max_positions} (max_position_embeddings)")
        device = embedding.weight.device
        with torch.no_grad():
            prefix = embedding(ids.to(device))  # [R, P, D]
            R, P, _ = prefix.shape
            cache = new_cache(text_config, R, session_slots(P + N + max_window), prefix.dtype, prefix.device)
            super().__init__(prefix, lengths, batch_size, null_prompts is not None, cache, vocab_size)
        self.draft_vocab = draft_vocab
        if prompt_in_vocab:
            self.prompt = [p.to(self.device) for p in rows[:batch_size]]

    def positions(self, index: torch.Tensor) -> torch.Tensor:
        # drafts past the end of the layout (never committed) may run past the context: keep their ids in range
        return super().positions(index).clamp(max=(self.max_positions or 1 << 62) - 1)

    def run_lean(self, h, position_ids, view: CacheView) -> torch.Tensor:
        """The session's `lean` forward (mmspec.adapters.llama: logits, or a decoder's last hidden state) on h [R, T, D],
        keeping the features a draft head reads, as `run` does."""
        out, features = self.lean(h, position_ids, view, self.taps)
        if self.taps:
            self.features = features
        return out

    def run(self, decoder: torch.nn.Module, h, position_ids, view: CacheView):
        """Run a transformers decoder on embeddings h [R, T, D] over this session's cache `view`."""
        with cached_attention(decoder):
            out = decoder(inputs_embeds=h, position_ids=position_ids, use_cache=False, mmspec_view=view,
                          output_hidden_states=bool(self.taps))
        if self.taps:  # hidden_states[i]: the input of layer i (the last: the final layer's output, after its norm)
            layers = len(out.hidden_states) - 1
            if any(not 0 <= i <= layers for i in self.taps):
                raise ValueError(f"features of layers {tuple(self.taps)} asked for (a draft head's); the model has "
                                 f"{layers} layers (0 .. {layers}: each layer's input, then the normed output)")
            self.features = torch.cat([out.hidden_states[i] for i in self.taps], -1)
        return out


MASKED = -1e9  # logit of a token that may not appear at a free position (finite: -inf - -inf in a CFG mix is NaN)


class AllowedTokensSession(HFSession):
    """A session over a decoder `lm` (its last hidden state through `model.lm_head`) whose free positions may take the
    `allowed` [V] tokens only: every other logit is set to MASKED in both CFG halves, which shifts no allowed token's
    logit and keeps the others at probability zero under either CFG rule, as masking after the mix does."""

    def __init__(self, model, lm, allowed: torch.Tensor, *args, **kwargs):
        self.model, self.lm, self.allowed = model, lm, allowed
        super().__init__(*args, **kwargs)

    def embed(self, tokens):
        return self.model.get_input_embeddings()(tokens)

    def logits(self, h, positions, view):
        logits = self.model.lm_head(self.run(self.lm, h, positions, view).last_hidden_state)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # -1e9 overflows half precision
        return logits.masked_fill(~self.allowed, MASKED)

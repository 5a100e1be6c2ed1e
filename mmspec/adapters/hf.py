"""Run transformers decoders on mmspec's static KV cache.

transformers caches keep one length for the whole batch; speculation needs one per row. mmspec
registers an attention function ("mmspec") that writes keys/values at each row's own slots of a
StaticKVCache and masks by slot, and switches a model to it only for the duration of a call.
Everything else (RoPE from explicit position_ids, MLPs, norms) is the model's own code.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, PretrainedConfig

from mmspec.adapters.base import PrefixSession
from mmspec.cache import StaticKVCache

ATTENTION = "mmspec"


def mmspec_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, *,
                     mmspec_cache: StaticKVCache, mmspec_slots: torch.Tensor, **kwargs):
    """query [B, H, T, D], key/value [B, Hkv, T, D] (RoPE applied) -> [B, T, H, D]."""
    k, v = mmspec_cache.update(module.layer_idx, key, value, mmspec_slots)
    if k.shape[1] != query.shape[1]:
        k = k.repeat_interleave(query.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(query.shape[1] // v.shape[1], dim=1)
    out = F.scaled_dot_product_attention(query, k.to(query.dtype), v.to(query.dtype),
                                         attn_mask=mmspec_cache.mask(mmspec_slots), scale=scaling)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(ATTENTION, mmspec_attention)


@contextmanager
def cached_attention(model: torch.nn.Module):
    """Within the block, every attention layer of `model` uses mmspec_attention."""
    configs = {id(m.config): m.config for m in model.modules() if isinstance(getattr(m, "config", None), PretrainedConfig)}
    saved = {key: cfg._attn_implementation_internal for key, cfg in configs.items()}
    try:
        for cfg in configs.values():
            cfg._attn_implementation_internal = ATTENTION
        yield
    finally:
        for key, cfg in configs.items():
            cfg._attn_implementation_internal = saved[key]


def new_cache(text_config: PretrainedConfig, batch: int, max_len: int, dtype, device) -> StaticKVCache:
    heads = text_config.num_attention_heads
    head_dim = getattr(text_config, "head_dim", None) or text_config.hidden_size // heads
    kv_heads = getattr(text_config, "num_key_value_heads", None) or heads
    return StaticKVCache(text_config.num_hidden_layers, batch, kv_heads, max_len, head_dim, dtype=dtype, device=device)


def prompt_ids(prompts, what: str = "prompt", tokenizer=None) -> list[torch.Tensor]:
    """One prompt or a batch (token-id lists, a [C, P] tensor, or strings with a tokenizer) -> 1D id tensors."""
    if isinstance(prompts, torch.Tensor):
        prompts = list(prompts if prompts.dim() == 2 else prompts[None])
    elif isinstance(prompts, str) or (isinstance(prompts, (list, tuple)) and prompts and isinstance(prompts[0], int)):
        prompts = [prompts]
    out = []
    for p in prompts:
        if isinstance(p, str):
            if tokenizer is None:
                raise ValueError(f"a string {what} needs a tokenizer")
            p = tokenizer(p, return_tensors="pt").input_ids[0]
        out.append(torch.as_tensor(p, dtype=torch.long).flatten())
    if not out or any(len(p) == 0 for p in out):
        raise ValueError(f"every {what} needs at least one token id")
    return out


def left_pad(prompts: list[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged 1D prompts -> ids [B, P] left-padded, and lengths [B]."""
    lengths = torch.tensor([len(p) for p in prompts])
    if (lengths == 0).any():
        raise ValueError("every prompt needs at least one token (e.g. BOS)")
    ids = torch.full((len(prompts), int(lengths.max())), pad_id, dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, ids.shape[1] - len(p):] = p
    return ids, lengths


class HFSession(PrefixSession):
    """A PrefixSession whose cache is shaped by a transformers text config."""

    def __init__(self, prefix, lengths, batch_size: int, cfg: bool, text_config: PretrainedConfig, max_new: int,
                 vocab_size: int):
        R, P, _ = prefix.shape
        cache = new_cache(text_config, R, P + max_new, prefix.dtype, prefix.device)
        super().__init__(prefix, lengths, batch_size, cfg, cache, vocab_size)

    def run(self, decoder: torch.nn.Module, h, position_ids, slots):
        """Run a transformers decoder on embeddings h [R, T, D] over this session's cache."""
        with cached_attention(decoder):
            return decoder(inputs_embeds=h, position_ids=position_ids, use_cache=False,
                           mmspec_cache=self.cache, mmspec_slots=slots)

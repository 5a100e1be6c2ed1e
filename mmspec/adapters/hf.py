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


def left_pad(prompts: list[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged 1D prompts -> ids [B, P] left-padded, and lengths [B]."""
    lengths = torch.tensor([len(p) for p in prompts])
    if (lengths == 0).any():
        raise ValueError("every prompt needs at least one token (e.g. BOS)")
    ids = torch.full((len(prompts), int(lengths.max())), pad_id, dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, ids.shape[1] - len(p):] = p
    return ids, lengths


class PrefixSession:
    """A session over a left-padded prefix of embeddings, with CFG as a second half of the batch.

    Subclasses give `embed(tokens [R, T]) -> [R, T, D]` and `logits(h [R, T, D], position_ids [R, T],
    cache, slots) -> [R, T, V]`. Row r's prefix occupies slots pad[r] .. P-1 (P = padded length) with
    positions 0 .. len[r]-1; generated index i sits at slot P + i with position len[r] + i.
    """

    def __init__(self, prefix: torch.Tensor, lengths: torch.Tensor, batch_size: int, cfg: bool,
                 text_config: PretrainedConfig, max_new: int, vocab_size: int):
        R, P, _ = prefix.shape  # [R, P, D], R = batch_size * (2 if cfg else 1)
        self.batch_size, self.cfg, self.vocab_size, self.device = batch_size, cfg, vocab_size, prefix.device
        self.prefix_len, self.lengths = P, lengths.to(prefix.device)
        self.cache = new_cache(text_config, R, P + max_new, prefix.dtype, prefix.device)
        self.cache.first = P - self.lengths  # pad slots are never attended to
        self.start_embedding = prefix[:, -1]
        if P > 1:
            pos = (torch.arange(P - 1, device=self.device) - self.cache.first[:, None]).clamp(min=0)
            self._run(prefix[:, :-1], pos)

    def _run(self, h, position_ids):
        slots = self.cache.slots(h.shape[1])
        logits = self.logits(h, position_ids, self.cache, slots)
        self.cache.advance(slots)
        return logits

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, start: torch.Tensor):
        halves = 2 if self.cfg else 1
        tokens, start = tokens.repeat(halves, 1), start.repeat(halves)
        index = start[:, None] + torch.arange(tokens.shape[1], device=tokens.device)  # [R, L]
        h = self.embed(tokens.clamp(min=0))
        h = torch.where((index < 0)[..., None], self.start_embedding[:, None].to(h.dtype), h)
        self.cache.truncate(self.prefix_len + start)
        logits = self._run(h, self.lengths[:, None] + index)
        return (logits[: self.batch_size], logits[self.batch_size:]) if self.cfg else (logits, None)

    def embed(self, tokens):
        raise NotImplementedError

    def logits(self, h, position_ids, cache, slots):
        raise NotImplementedError

"""Target adapter for mmspec's reference GPT (class-label, caption or prompt conditioned, 1D/2D/3D RoPE)."""
from __future__ import annotations

import torch

from mmspec.adapters.base import PrefixSession, repeat_condition
from mmspec.cache import session_slots
from mmspec.layouts import Layout
from mmspec.memory import Shape
from mmspec.reference.gpt import GPT


class ReferenceTarget:
    def __init__(self, model: GPT):
        self.model = model.eval()
        self.vocab_size = model.config.vocab_size

    def memory_shape(self, condition, layout: Layout) -> Shape:
        """The GPT's sizes; every condition takes the model's prefix_len slots."""
        config = self.model.config
        return Shape(layers=config.n_layer, heads=config.n_head, kv_heads=config.n_kv_head or config.n_head,
                     head_dim=self.model.head_dim, dim=config.dim, vocab=config.vocab_size, prefix=config.prefix_len,
                     element=self.model.tok_embeddings.weight.element_size())

    def session(self, condition, layout: Layout, *, cfg: bool, num_samples: int = 1, max_window: int = 1):
        """condition: class ids [C], prompt ids [C, P], caption features [C, T, C'] or (features, mask [C, T])."""
        model, config = self.model, self.model.config
        if layout.axes != config.rope_axes:
            raise ValueError(f"{layout!r} has {layout.axes} position axes, the model's RoPE has {config.rope_axes}")
        if layout.length > config.block_size:
            raise ValueError(f"{layout!r} has {layout.length} tokens, longer than the model's block_size "
                             f"{config.block_size}")
        device = model.tok_embeddings.weight.device
        mask = None
        if isinstance(condition, (tuple, list)) and len(condition) == 2 and torch.is_tensor(condition[0]):
            condition, mask = condition  # caption features and their mask [C, T] (1 = real, left-padded)
        cond = repeat_condition(torch.as_tensor(condition, device=device), num_samples)
        model.check_condition(cond)
        if cfg and not model.has_null_condition:
            raise ValueError("CFG needs a null condition, and this model has none (trained without label dropout)")
        P = config.prefix_len
        lengths = None
        if mask is not None:
            lengths = P - _padding(repeat_condition(torch.as_tensor(mask, device=device), num_samples), P)
            lengths = lengths.repeat(2 if cfg else 1)
        rows = torch.cat([cond, model.null_condition(cond.shape[0])]) if cfg else cond
        with torch.no_grad():
            prefix = model.embed_condition(rows)  # [R, P, D]
        cache = model.new_cache(rows.shape[0], session_slots(P + layout.length + max_window))
        return ReferenceSession(model, layout, prefix, lengths, cond.shape[0], cfg, cache)


class ReferenceSession(PrefixSession):
    """Positions are rows of the model's RoPE table for the layout, made once per generation and gathered once
    per forward: generated index i reads row i (drafts past the end of the layout, never committed, the last
    position's), and the condition's indices -P .. -1 wrap around to the table's last P rows, which hold the
    condition's rotation (LlamaGen's zero rotation, `cond_rope`): the index is the row, with no op to map it."""

    def __init__(self, model: GPT, layout: Layout, prefix, lengths, batch_size, cfg, cache):
        self.model = model
        P, N = prefix.shape[1], layout.length
        rot = model.rope_table(layout.positions().to(prefix.device))  # [N + 1, D/2]
        overhang = cache.max_len - P - N  # window slots past the end of the layout
        self.rot = torch.cat([rot[:N], rot[N - 1:N].expand(overhang, -1), rot[N:].expand(P, -1)])[:, None]  # [S, 1, D/2]
        super().__init__(prefix, lengths, batch_size, cfg, cache, model.config.vocab_size)

    def positions(self, index):
        return index

    def embed(self, tokens):
        return self.model.tok_embeddings(tokens)

    def logits(self, h, positions, view):
        # rotations [R, T, 1, D/2]; the features of the layers a draft head reads (None: no head)
        logits, self.features = self.model.forward_features(h, self.rot[positions], view, self.taps)
        return logits


def _padding(mask: torch.Tensor, length: int) -> torch.Tensor:
    """[B, T] condition mask (1 = real token) -> [B] count of leading padding; padding must be on the left."""
    if mask.shape[1] != length:
        raise ValueError(f"condition mask has {mask.shape[1]} entries, the model's condition has {length}")
    pads = (mask == 0).long().sum(1)
    if not (mask.long().cumsum(1) > 0).eq(torch.arange(length, device=mask.device) >= pads[:, None]).all():
        raise ValueError("condition masks must pad on the left (zeros first, as LlamaGen flips them)")
    return pads

"""Target adapter for mmspec's reference GPT (class-label or prompt conditioned, 1D/2D/3D RoPE)."""
from __future__ import annotations

import torch

from mmspec.adapters.base import repeat_condition, window_index
from mmspec.layouts import Layout
from mmspec.reference.gpt import GPT


class ReferenceTarget:
    def __init__(self, model: GPT):
        self.model = model.eval()
        self.vocab_size = model.config.vocab_size

    def session(self, condition, layout: Layout, *, cfg: bool, num_samples: int = 1, max_window: int = 1):
        return ReferenceSession(self.model, condition, layout, cfg=cfg, num_samples=num_samples,
                                max_window=max_window)


class ReferenceSession:
    def __init__(self, model: GPT, condition, layout: Layout, *, cfg: bool, num_samples: int, max_window: int):
        cfg_ = model.config
        if layout.axes != cfg_.rope_axes:
            raise ValueError(f"{layout!r} has {layout.axes} position axes, the model's RoPE has {cfg_.rope_axes}")
        if layout.length > cfg_.block_size:
            raise ValueError(f"{layout!r} has {layout.length} tokens, longer than the model's block_size "
                             f"{cfg_.block_size}")
        device = model.tok_embeddings.weight.device
        mask = None
        if isinstance(condition, (tuple, list)) and len(condition) == 2 and torch.is_tensor(condition[0]):
            condition, mask = condition  # caption features and their mask [C, T] (1 = real, left-padded)
        cond = repeat_condition(torch.as_tensor(condition, device=device), num_samples)
        model.check_condition(cond)
        if cfg and not model.has_null_condition:
            raise ValueError("CFG needs a null condition, and this model has none (trained without label dropout)")
        self.model, self.cfg, self.prompt, self.device = model, cfg, None, device
        self.batch_size, self.vocab_size = cond.shape[0], cfg_.vocab_size
        rows = torch.cat([cond, model.null_condition(cond.shape[0])]) if cfg else cond
        self.positions = layout.positions().to(device)  # [N, A]
        self.prefix_len = P = cfg_.prefix_len
        self.cache = model.new_cache(rows.shape[0], P + layout.length + max_window)
        if mask is not None:
            self.cache.first = _padding(repeat_condition(torch.as_tensor(mask, device=device), num_samples), P)
            self.cache.first = self.cache.first.repeat(2 if cfg else 1)
        with torch.no_grad():
            prefix = model.embed_condition(rows)  # [R, P, D]
            self.start_embedding = prefix[:, -1]  # index -1 is fed with the first window
            if P > 1:
                self._run(prefix[:, :-1], torch.zeros(rows.shape[0], P - 1, cfg_.rope_axes, dtype=torch.long,
                                                      device=device), torch.ones(rows.shape[0], P - 1, dtype=torch.bool,
                                                                                 device=device))

    def _run(self, h, positions, is_cond):
        cos, sin = self.model.rope(positions, is_cond)
        slots = self.cache.slots(h.shape[1])
        logits = self.model(h, cos, sin, self.cache, slots)
        self.cache.advance(slots)
        return logits

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, start: torch.Tensor):
        halves = 2 if self.cfg else 1
        tokens, start = tokens.repeat(halves, 1), start.repeat(halves)
        index = window_index(start, tokens.shape[1])  # [R, L]
        is_cond = index < 0
        h = self.model.tok_embeddings(tokens.clamp(min=0))
        h = torch.where(is_cond[..., None], self.start_embedding[:, None].to(h.dtype), h)
        positions = self.positions[index.clamp(0, len(self.positions) - 1)]
        positions = positions.masked_fill(is_cond[..., None], 0)
        self.cache.truncate(self.prefix_len + start)
        logits = self._run(h, positions, is_cond)
        return (logits[: self.batch_size], logits[self.batch_size:]) if self.cfg else (logits, None)


def _padding(mask: torch.Tensor, length: int) -> torch.Tensor:
    """[B, T] condition mask (1 = real token) -> [B] count of leading padding; padding must be on the left."""
    if mask.shape[1] != length:
        raise ValueError(f"condition mask has {mask.shape[1]} entries, the model's condition has {length}")
    pads = (mask == 0).long().sum(1)
    if not (mask.long().cumsum(1) > 0).eq(torch.arange(length, device=mask.device) >= pads[:, None]).all():
        raise ValueError("condition masks must pad on the left (zeros first, as LlamaGen flips them)")
    return pads

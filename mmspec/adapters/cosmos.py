"""Target adapter for the reference Cosmos-1 autoregressive transformer (base: continue a video; Video2World: with a
text condition through cross-attention)."""
from __future__ import annotations

import torch

from mmspec.adapters.base import PrefixSession, repeat_condition
from mmspec.cache import session_slots
from mmspec.layouts import Layout
from mmspec.memory import Shape
from mmspec.reference.cosmos import Context, Cosmos


NO_CFG = "Cosmos was trained without a null condition: it cannot run CFG (cfg_scale must be 1)"


def refuse_cfg(cfg_scale: "float | None") -> None:
    """A CFG scale other than 1 (None: the default, none) refused where the caller knows it, before any work."""
    if cfg_scale is not None and cfg_scale != 1:
        raise ValueError(NO_CFG)


class CosmosTarget:
    def __init__(self, model: Cosmos):
        self.model = model.eval()
        self.vocab_size = model.config.vocab_size

    def memory_shape(self, condition, layout: Layout) -> Shape:
        """The transformer's sizes; before the layout, one slot (<bov>, or a base model's padding slot) and a
        Video2World row's S text features, counted as if every layer cached their keys and values (the layers that
        cross-attend do: at least what they hold)."""
        config = self.model.config
        features = condition[0] if isinstance(condition, (tuple, list)) else condition
        text = 0 if features is None else torch.as_tensor(features).shape[-2]
        return Shape(layers=config.n_layers, heads=config.n_heads, kv_heads=config.n_kv_heads, head_dim=config.head,
                     dim=config.dim, vocab=config.vocab_size, prefix=1 + text,
                     element=self.model.tok_embeddings.weight.element_size())

    def session(self, condition, layout: Layout, *, cfg: bool, num_samples: int = 1, max_window: int = 1):
        """condition: None for a base model (one condition: the video, given as tokens); for Video2World the text
        features [C, S, context_dim] or (features, mask [C, S]) (1 = seen)."""
        model, config = self.model, self.model.config
        T, H, W = config.latent_shape
        if layout.axes != 3 or layout.forced().ge(0).any() or layout.h != H or layout.w != W or layout.t > T:
            raise ValueError(f"{layout!r}: a Cosmos model generates Grid3D(t, {H}, {W}) grids, t <= {T}, "
                             "without structural tokens")
        if cfg:
            raise ValueError(NO_CFG)
        device, dtype = model.tok_embeddings.weight.device, model.tok_embeddings.weight.dtype
        context = None
        if config.video2world:
            if condition is None:
                raise ValueError("a Video2World model needs its text condition: T5 features [C, S, "
                                 f"{config.context_dim}] or (features, mask)")
            features, mask = condition if isinstance(condition, (tuple, list)) else (condition, None)
            features = repeat_condition(torch.as_tensor(features, device=device), num_samples)
            mask = None if mask is None else repeat_condition(torch.as_tensor(mask, device=device), num_samples)
            with torch.no_grad():
                context = model.encode_context(features, mask)
            rows = features.shape[0]
            prefix = model.tok_embeddings(torch.full((rows, 1), config.bov_token, device=device))  # [R, 1, D]
            lengths = None
        else:
            if condition is not None:
                raise ValueError("a Cosmos base model takes no condition (None): it continues the video given as "
                                 "tokens")
            rows = num_samples
            # no <bov>: index -1 is a padding slot (it sees itself only and nothing sees it), and token 0, which a base
            # model cannot predict, must be given
            prefix = torch.zeros(rows, 1, config.dim, device=device, dtype=dtype)
            lengths = torch.zeros(rows, dtype=torch.long, device=device)
        cache = model.new_cache(rows, session_slots(1 + layout.length + max_window))
        return CosmosSession(model, layout, prefix, lengths, rows, cache, context)


class CosmosSession(PrefixSession):
    """Positions are rows of the model's tables for the layout, gathered once per forward: generated index i reads row
    i (drafts past the end of the layout, never committed, the last position's), and index -1 (<bov>, or the padding
    slot of a base model) wraps around to the table's last row, the zero row."""

    def __init__(self, model: Cosmos, layout: Layout, prefix, lengths, batch_size, cache, context: Context | None):
        self.model, self.context = model, context
        N = layout.length
        overhang = cache.max_len - 1 - N  # window slots past the end of the layout

        def rows(table):
            return None if table is None else torch.cat([table[:N], table[N - 1:N].expand(overhang, -1), table[N:]])

        cos, sin, absolute = model.position_tables(layout.positions())
        self.cos, self.sin, self.absolute = rows(cos)[:, None], rows(sin)[:, None], rows(absolute)  # [S, 1, hd], [S, D]
        super().__init__(prefix, lengths, batch_size, False, cache, model.config.vocab_size)

    def positions(self, index):
        return index

    def embed(self, tokens):
        return self.model.tok_embeddings(tokens)

    def logits(self, h, positions, view):
        absolute = None if self.absolute is None else self.absolute[positions]
        return self.model(h, self.cos[positions], self.sin[positions], absolute, view, self.context)

    def select(self, rows: torch.Tensor) -> None:
        super().select(rows)
        if self.context is not None:
            self.context = self.context.select(rows)

    def _takes(self, other) -> bool:
        return (self.context is None) == (other.context is None) and (self.context is None or self.context.fits(
            other.context))

    def _take(self, other, rows: torch.Tensor) -> None:
        if self.context is not None:
            self.context.take(other.context, rows)

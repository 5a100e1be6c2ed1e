"""Reference Cosmos-1 autoregressive transformer (NVIDIA Cosmos-1.0-Autoregressive 4B/12B, Video2World 5B/13B).

Lineage: NVIDIA Cosmos `cosmos1/models/autoregressive/networks/transformer.py` and `modules/` (Apache-2.0), read
in junhyukso/SCD's copy: Llama-style blocks (RMSNorm, SwiGLU with an explicit hidden size, grouped-query attention
with separate wq/wk/wv and RMSNorm on queries and keys per head), a 3D rotary embedding over (latent frame, row,
col) in TransformerEngine's rotate-half layout, and for Video2World a cross-attention after every self-attention
(to T5 features, 1024 wide), a sin-cos absolute position embedding added before every layer, and a <bov> token at
sequence position 0 with zero RoPE angle and zero absolute embedding. Parameter names are Cosmos's, so its
checkpoints load key for key (mmspec.reference.cosmos_checkpoint). Changes: positions come in explicitly (one
forward verifies L drafted positions), the KV cache is mmspec's StaticKVCache, and the cross-attention's keys and
values are computed once per generation (`encode_context`).

Numerics follow Cosmos's PyTorch path (RoPE "v2"): rotary angles in fp32 from fp32 inverse frequencies (with YaRN's
per-frequency factors for 12B/13B, and no magnitude scale, which only its "v1" applies), cos/sin cast to the queries'
dtype; the absolute embedding rounded to bf16, the dtype Cosmos builds it in whatever the model's.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from mmspec.cache import CacheView, StaticKVCache
from mmspec.layouts import Grid3D
from mmspec.loading import WQ_WK_WV, W1_W3, fused_product, product
from mmspec.reference.gpt import RMSNorm, decode_norm

QK_NORM_EPS = 1e-5  # Cosmos's Attention builds its q/k norms with its own default eps, not the config's


@dataclass
class CosmosConfig:
    vocab_size: int = 64000  # video codes (FSQ 8x8x8x5x5x5): the output rows
    embedding_size: int | None = None  # input embedding rows (Video2World: 64064, <bov> rounded up to 64s); None: vocab
    bov_token: int | None = None  # Video2World: <bov> (64000) opens the sequence and predicts the first video token
    dim: int = 4096
    n_layers: int = 16
    n_heads: int = 32
    n_kv_heads: int = 8
    head_dim: int | None = None  # None: dim // n_heads
    ffn_hidden_size: int = 14336
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    latent_shape: list = field(default_factory=lambda: [5, 40, 64])  # (latent frames, rows, cols) it was trained on
    use_qk_normalization: bool = True
    apply_abs_pos_emb: bool = False
    insert_cross_attn: bool = False
    insert_cross_attn_every_k_layers: int = 1
    context_dim: int = 1024  # google-t5/t5-11b encoder states
    apply_yarn: bool = False
    yarn_scale: float | None = None
    yarn_beta_fast: float | None = None
    yarn_beta_slow: float | None = None
    original_latent_shape: list | None = None

    def __post_init__(self):
        self.latent_shape = list(self.latent_shape)
        if len(self.latent_shape) != 3 or min(self.latent_shape) < 1:
            raise ValueError(f"latent_shape must be 3 positive sizes (frames, rows, cols), got {self.latent_shape}")
        if self.head % 2 or self.n_heads % self.n_kv_heads:
            raise ValueError(f"head_dim {self.head} must be even and n_heads {self.n_heads} a multiple of "
                             f"n_kv_heads {self.n_kv_heads}")
        if self.embed_rows < self.vocab_size + (self.bov_token is not None):
            raise ValueError(f"embedding_size {self.embed_rows} leaves no row for the video codes and <bov>")
        if self.apply_yarn and (self.original_latent_shape is None or None in (self.yarn_scale, self.yarn_beta_fast,
                                                                               self.yarn_beta_slow)):
            raise ValueError("apply_yarn needs original_latent_shape, yarn_scale, yarn_beta_fast and yarn_beta_slow")

    @property
    def head(self) -> int:
        return self.head_dim or self.dim // self.n_heads

    @property
    def embed_rows(self) -> int:
        return self.embedding_size or self.vocab_size

    @property
    def video2world(self) -> bool:
        return self.insert_cross_attn

    def cross_layer(self, layer: int) -> bool:
        return self.insert_cross_attn and layer % self.insert_cross_attn_every_k_layers == 0

    def to_dict(self) -> dict:
        return asdict(self)


def inverse_frequencies(cfg: CosmosConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(temporal [dim_t/2], spatial [dim_h/2]) fp32 inverse frequencies: head_dim splits into dim_h for rows, dim_h
    for cols and the rest (dim_t) for frames, dim_h = head_dim // 6 * 2 (128 -> 44 + 42 + 42)."""
    dim_h = cfg.head // 6 * 2
    dim_t = cfg.head - 2 * dim_h
    spatial = 1.0 / cfg.rope_theta ** (torch.arange(0, dim_h, 2)[: dim_h // 2].float() / dim_h)
    temporal = 1.0 / cfg.rope_theta ** (torch.arange(0, dim_t, 2)[: dim_t // 2].float() / dim_t)
    if cfg.apply_yarn:
        spatial = spatial * _yarn_factors(cfg, spatial, cfg.original_latent_shape[1])
        temporal = temporal * _yarn_factors(cfg, temporal, cfg.original_latent_shape[0])
    return temporal, spatial


def _yarn_factors(cfg: CosmosConfig, inv_freq: torch.Tensor, original_len: int) -> torch.Tensor:
    """YaRN: frequencies below the slow cutoff slow down by yarn_scale, those above the fast one stay; linear between."""
    high = 2 * math.pi * cfg.yarn_beta_fast / original_len
    low = 2 * math.pi * cfg.yarn_beta_slow / original_len
    smooth = torch.clamp((inv_freq - low) / (high - low), min=0, max=1)
    return (1 - smooth) / cfg.yarn_scale + smooth


def rope_angles(cfg: CosmosConfig, positions: torch.Tensor) -> torch.Tensor:
    """positions [N, 3] (frame, row, col) -> fp32 angles [N, head_dim]: (frame, row, col) frequencies, twice (the
    rotate-half layout pairs channel i with channel i + head_dim/2)."""
    temporal, spatial = inverse_frequencies(cfg)
    p = positions.float()
    half = torch.cat([p[:, :1] * temporal, p[:, 1:2] * spatial, p[:, 2:] * spatial], -1)  # [N, head_dim/2]
    return torch.cat([half, half], -1)


def _sincos(dim: int, pos: torch.Tensor) -> torch.Tensor:
    """pos [N] -> [N, dim] fp64 (sin | cos) of pos x 10000^(-2i/dim), as MAE's 1D table."""
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0))
    out = pos.double()[:, None] * omega
    return torch.cat([out.sin(), out.cos()], -1)


def absolute_embedding(cfg: CosmosConfig, positions: torch.Tensor) -> torch.Tensor:
    """positions [N, 3] -> [N, dim] sin-cos embedding of (frame, row, col) over dim_t | dim_h | dim_h channels,
    rounded to bf16 as Cosmos stores it."""
    dim_h = cfg.dim // 6 * 2
    dim_t = cfg.dim - 2 * dim_h
    emb = torch.cat([_sincos(d, positions[:, a]) for a, d in enumerate((dim_t, dim_h, dim_h))], -1)
    return emb.to(torch.bfloat16)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, D] rotated in TransformerEngine's layout: channel i pairs with i + D/2. cos, sin [B, T, 1, D]."""
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        gate, up = fused_product(self, W1_W3, x).chunk(2, -1)
        return product(self.w2, F.silu(gate) * up)


class Attention(nn.Module):
    """Self-attention (keys from x, rotated, cached) or cross-attention (keys from the context, `context_dim` wide)."""

    def __init__(self, cfg: CosmosConfig, layer: int, context_dim: int | None = None):
        super().__init__()
        self.layer, self.n_head, self.n_kv_head, self.head_dim = layer, cfg.n_heads, cfg.n_kv_heads, cfg.head
        kv_in = context_dim or cfg.dim
        self.wq = nn.Linear(cfg.dim, self.n_head * self.head_dim, bias=False)
        self.wk = nn.Linear(kv_in, self.n_kv_head * self.head_dim, bias=False)
        self.wv = nn.Linear(kv_in, self.n_kv_head * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_head * self.head_dim, cfg.dim, bias=False)
        if cfg.use_qk_normalization:
            self.q_norm = RMSNorm(self.head_dim, QK_NORM_EPS)
            self.k_norm = RMSNorm(self.head_dim, QK_NORM_EPS)

    def _norm(self, x: torch.Tensor, which: str) -> torch.Tensor:
        norm = getattr(self, which, None)
        return x if norm is None else decode_norm(x, norm.weight, norm.eps)

    def _attend(self, q, k, v, mask, B: int, T: int) -> torch.Tensor:
        """q [B, H, T, D], k, v [B, Hkv, S, D] -> [B * T, dim]."""
        if self.n_kv_head != self.n_head:
            k = k.repeat_interleave(self.n_head // self.n_kv_head, dim=1)
            v = v.repeat_interleave(self.n_head // self.n_kv_head, dim=1)
        if k.dtype != q.dtype:  # a cache kept in another dtype than the model's
            k, v = k.type_as(q), v.type_as(q)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return product(self.wo, y.transpose(1, 2).reshape(B * T, -1))

    def forward(self, x, cos, sin, view: CacheView | None, mask, B: int, T: int):
        """Self-attention: x [B * T, dim] -> [B * T, dim]."""
        H, Hkv, D = self.n_head, self.n_kv_head, self.head_dim
        q, k, v = fused_product(self, WQ_WK_WV, x).view(B, T, H + 2 * Hkv, D).split([H, Hkv, Hkv], 2)
        q = rotate(self._norm(q, "q_norm"), cos, sin).transpose(1, 2)  # [B, H, T, D]
        k = rotate(self._norm(k, "k_norm"), cos, sin).transpose(1, 2)
        v = v.transpose(1, 2)
        if view is not None:
            k, v = view.update(self.layer, k, v)
        return self._attend(q, k, v, mask, B, T)

    def context_kv(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention: context [B, S, context_dim] -> its keys and values [B, Hkv, S, D] (no rotation)."""
        B, S, _ = context.shape
        k = self._norm(product(self.wk, context).view(B, S, self.n_kv_head, self.head_dim), "k_norm")
        v = product(self.wv, context).view(B, S, self.n_kv_head, self.head_dim)
        return k.transpose(1, 2), v.transpose(1, 2)

    def cross(self, x, kv: tuple[torch.Tensor, torch.Tensor], mask, B: int, T: int):
        """Cross-attention: x [B * T, dim] attending to the context's keys and values -> [B * T, dim]."""
        q = self._norm(product(self.wq, x).view(B, T, self.n_head, self.head_dim), "q_norm").transpose(1, 2)
        return self._attend(q, *kv, mask, B, T)


@dataclass
class Context:
    """A generation's text condition, encoded once: per cross-attention layer its keys and values [B, Hkv, S, D],
    and the mask as an additive bias [B, 1, 1, S] (None: every context token is seen)."""

    kv: dict[int, tuple[torch.Tensor, torch.Tensor]]
    bias: torch.Tensor | None

    def select(self, rows: torch.Tensor) -> "Context":
        return Context({i: (k[rows], v[rows]) for i, (k, v) in self.kv.items()},
                       None if self.bias is None else self.bias[rows])

    def fits(self, other: "Context") -> bool:
        """Whether `other`'s rows can take rows of this one (`take`): the same layers, context length and mask."""
        return self.kv.keys() == other.kv.keys() and (self.bias is None) == (other.bias is None) and all(
            self.kv[i][0].shape[1:] == other.kv[i][0].shape[1:] for i in self.kv)

    def take(self, other: "Context", rows: torch.Tensor) -> None:
        """Rows `rows` [b] become `other`'s b rows, in place."""
        for i, (k, v) in self.kv.items():
            k[rows], v[rows] = other.kv[i]
        if self.bias is not None:
            self.bias[rows] = other.bias


class Block(nn.Module):
    def __init__(self, cfg: CosmosConfig, layer: int):
        super().__init__()
        self.attention = Attention(cfg, layer)
        if cfg.cross_layer(layer):
            self.cross_attention = Attention(cfg, layer, cfg.context_dim)
            self.cross_attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg.dim, cfg.ffn_hidden_size)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, cos, sin, view, mask, context: Context | None, B: int, T: int):
        def norm(y, module):
            return decode_norm(y, module.weight, module.eps)

        h = x + self.attention.forward(norm(x, self.attention_norm), cos, sin, view, mask, B, T)
        if hasattr(self, "cross_attention"):
            h = h + self.cross_attention.cross(norm(h, self.cross_attention_norm), context.kv[self.attention.layer],
                                               context.bias, B, T)
        return h + self.feed_forward.forward(norm(h, self.ffn_norm))


class Cosmos(nn.Module):
    def __init__(self, cfg: CosmosConfig):
        super().__init__()
        self.config = cfg
        self.tok_embeddings = nn.Embedding(cfg.embed_rows, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    @property
    def layout(self) -> Grid3D:
        """The token grid the model was trained on: latent frames of rows x cols, raster order."""
        return Grid3D(*self.config.latent_shape)

    def encode_context(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> Context:
        """Video2World's text condition: features [B, S, context_dim] (T5 encoder states) and mask [B, S] (1 = seen;
        Cosmos's own pipeline passes all ones) -> the cross-attention keys and values of every layer that has one."""
        cfg = self.config
        if not cfg.video2world:
            raise ValueError("this Cosmos model has no cross-attention (a base model): it takes no text condition")
        if features.dim() != 3 or features.shape[2] != cfg.context_dim:
            raise ValueError(f"text features must be [B, S, {cfg.context_dim}], got {tuple(features.shape)}")
        features = features.to(self.tok_embeddings.weight.dtype)
        kv = {i: block.cross_attention.context_kv(features) for i, block in enumerate(self.layers)
              if hasattr(block, "cross_attention")}
        bias = None
        if mask is not None:
            if mask.shape != features.shape[:2]:
                raise ValueError(f"text mask must be [B, S] = {tuple(features.shape[:2])}, got {tuple(mask.shape)}")
            bias = torch.zeros(mask.shape, dtype=features.dtype, device=features.device)
            bias = bias.masked_fill(~mask.bool(), float("-inf"))[:, None, None]
        return Context(kv, bias)

    def position_tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Layout positions [N, 3] -> (cos, sin [N + 1, head_dim] in the model's dtype, absolute embedding [N + 1, dim]
        or None): row i is generated token i, row N the zero row (angle 0, no embedding) of <bov>."""
        w = self.tok_embeddings.weight
        angles = torch.cat([rope_angles(self.config, positions.cpu()), torch.zeros(1, self.config.head)])
        cos, sin = (f(angles).to(device=w.device, dtype=w.dtype) for f in (torch.cos, torch.sin))
        absolute = None
        if self.config.apply_abs_pos_emb:
            emb = absolute_embedding(self.config, positions.cpu())
            absolute = torch.cat([emb, emb.new_zeros(1, emb.shape[1])]).to(device=w.device, dtype=w.dtype)
        return cos, sin, absolute

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, absolute: torch.Tensor | None = None,
                view: CacheView | None = None, context: Context | None = None) -> torch.Tensor:
        """Embeddings h [B, T, dim] at rotations cos, sin [B, T, 1, head_dim] (and absolute embeddings [B, T, dim],
        added before every layer as Cosmos does), through a cache `view` (or a plain causal pass) -> logits
        [B, T, V]."""
        B, T, D = h.shape
        if self.config.video2world and context is None:
            raise ValueError("a Video2World model needs its text condition (encode_context)")
        mask = torch.ones(T, T, dtype=torch.bool, device=h.device).tril() if view is None else view.bias(h.dtype)
        x = h.reshape(B * T, D)
        add = None if absolute is None else absolute.expand(B, T, D).reshape(B * T, D)
        for layer in self.layers:
            if add is not None:
                x = x + add
            x = layer.forward(x, cos, sin, view, mask, context, B, T)
        x = decode_norm(x, self.norm.weight, self.norm.eps)
        return product(self.output, x).view(B, T, -1)

    def forward_reference(self, seq: torch.Tensor, context: torch.Tensor | None = None,
                          context_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Cosmos's own forward over a whole sequence without a cache: seq [B, S] at sequence positions 0..S-1
        (Video2World: <bov> first, then video tokens; base: video tokens) -> logits [B, S, V], row s predicting
        seq[s + 1]. What `Transformer.forward(seq, input_pos=arange(S), context, context_mask)` returns."""
        S, N = seq.shape[1], self.layout.length
        shift = int(self.config.bov_token is not None)
        cos, sin, absolute = self.position_tables(self.layout.positions())
        rows = torch.arange(S) - shift
        rows = torch.where(rows < 0, N, rows).to(seq.device)  # <bov>: the zero row
        ctx = None if context is None else self.encode_context(context, context_mask)
        return self(self.tok_embeddings(seq), cos[rows][None, :, None], sin[rows][None, :, None],
                    None if absolute is None else absolute[rows][None], context=ctx)

    def forward_sequence(self, tokens: torch.Tensor, context: torch.Tensor | None = None,
                         context_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher-forced video tokens [B, N] -> logits [B, N, V], row i predicting token i (a base model has nothing
        to predict token 0 from: its row 0 is NaN)."""
        cfg = self.config
        if cfg.bov_token is not None:
            bov = torch.full_like(tokens[:, :1], cfg.bov_token)
            return self.forward_reference(torch.cat([bov, tokens[:, :-1]], 1), context, context_mask)
        logits = self.forward_reference(tokens[:, :-1], context, context_mask)
        return torch.cat([torch.full_like(logits[:, :1], float("nan")), logits], 1)

    def new_cache(self, batch: int, max_len: int) -> StaticKVCache:
        cfg, w = self.config, self.tok_embeddings.weight
        return StaticKVCache(cfg.n_layers, batch, cfg.n_kv_heads, max_len, cfg.head, dtype=w.dtype, device=w.device)

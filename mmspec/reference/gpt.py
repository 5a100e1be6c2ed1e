"""Reference LlamaGen-style GPT for token grids (1D, 2D and 3D RoPE).

Lineage: FoundationVision/LlamaGen `autoregressive/models/gpt.py` (MIT), itself after gpt-fast and
Llama: RMSNorm, SwiGLU feed-forward, fused wqkv, interleaved-pair RoPE whose pairs are split
between the grid axes, class-label conditioning with a null class for CFG. Parameter names match
LlamaGen's so its checkpoints load key for key (class labels, or T5 caption features through
`cls_embedding.cap_proj` with the learned `uncond_embedding` as null). Changes: positions come in
explicitly (so one forward can verify L drafted positions of a grid), the KV cache is mmspec's
StaticKVCache, and a token-prefix condition (prompt word ids, pad id 0 = null) is added.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from mmspec.cache import CacheView, StaticKVCache
from mmspec.loading import W1_W3, fused_product, product


# the Python types each annotation of GPTConfig admits (a float field takes an int too, as JSON writes 1e4 as 10000)
_TYPES = {"int": (int,), "float": (float, int), "bool": (bool,), "str": (str,), "int | None": (int, type(None)),
          "float | None": (float, int, type(None))}
_COUNTS = ("vocab_size", "dim", "n_layer", "n_head", "multiple_of", "block_size")


@dataclass
class GPTConfig:
    vocab_size: int = 16384
    dim: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_kv_head: int | None = None
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    rope_axes: int = 2  # 1: text, 2: (row, col), 3: (frame, row, col)
    block_size: int = 256  # longest generated sequence the model was trained for
    num_classes: int = 0  # > 0: class-label condition (LlamaGen c2i)
    class_null: bool = True  # the class table has a null row num_classes (LlamaGen: class_dropout_prob > 0)
    cond_vocab_size: int = 0  # > 0: token-prefix condition of cond_len ids, id 0 = pad / null
    caption_dim: int = 0  # > 0: cond_len caption feature vectors (LlamaGen t2i, T5 features)
    cond_len: int = 0
    cond_rope: str = "zero"  # "zero": condition q/k rotate by 0 -> vanish (LlamaGen); "identity": angle 0

    def __post_init__(self):
        for f in fields(self):  # a config.json may hold "six" or 6.5 where a count belongs
            value, allowed = getattr(self, f.name), _TYPES[f.type]
            if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
                raise ValueError(f"{f.name} must be {f.type}, got {value!r}")
        small = [f"{name} must be >= 1, got {getattr(self, name)}" for name in _COUNTS if getattr(self, name) < 1]
        if small:
            raise ValueError("; ".join(small))
        if self.rope_axes not in (1, 2, 3):
            raise ValueError(f"rope_axes must be 1, 2 or 3, got {self.rope_axes}")
        if sum(x > 0 for x in (self.num_classes, self.cond_vocab_size, self.caption_dim)) != 1:
            raise ValueError("set exactly one of num_classes (class labels), cond_vocab_size (token prefix) "
                             "or caption_dim (caption features)")
        if not self.num_classes and self.cond_len < 1:
            raise ValueError("a token-prefix or caption condition needs cond_len >= 1")
        if self.cond_rope not in ("zero", "identity"):
            raise ValueError(f"cond_rope must be 'zero' or 'identity', got {self.cond_rope!r}")
        if (self.dim // self.n_head) % (2 * self.rope_axes):
            raise ValueError(f"head dim {self.dim // self.n_head} must split into {self.rope_axes} rotary groups")

    @property
    def prefix_len(self) -> int:
        return 1 if self.num_classes else self.cond_len

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return decode_norm(x, self.weight, self.eps)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in fp32 (LlamaGen; transformers' Llama computes the same products). Inside the GPT's forward, layers
    call `decode_norm`, `product` (mmspec.loading) on their Linear modules and their submodules' forward, rather than
    calling the modules: a module call's Python (hooks, which nothing here sets) costs more than a decode step's small
    products (6% of a one-token forward on a CPU)."""
    if x.dtype == torch.float32:  # one op: the same products as the line below (weight applied last)
        return F.rms_norm(x, weight.shape, weight, eps)
    return F.rms_norm(x.float(), x.shape[-1:], eps=eps).type_as(x) * weight


def decode_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`rms_norm` for mmspec's own models, in fewer ops when decoding in fp32: four, three of them on [.., 1], where
    F.rms_norm makes seven over [.., D] (22 against 30-35 us a call on a CPU, 13 calls a forward of the bundled GPTs).
    The same up to rounding (1e-6), and each row its own whatever the batch, as `exact` needs. (transformers' models
    keep `rms_norm`, whose products are theirs.)"""
    if x.dtype != torch.float32 or torch.is_grad_enabled():  # (training: F.rms_norm's gradient, finite at 0)
        return rms_norm(x, weight, eps)
    compiling = torch.compiler.is_compiling()
    e = None if compiling else _EPS.get((eps, x.device))
    if e is None:
        e = torch.full((), eps, device=x.device)
        if not compiling:
            _EPS[(eps, x.device)] = e
    ss = torch.linalg.vector_norm(x, dim=-1, keepdim=True)  # [.., 1] the root of the sum of squares
    return x * torch.rsqrt(torch.addcmul(e, ss, ss, value=1.0 / x.shape[-1])) * weight


_EPS: dict[tuple[float, torch.device], torch.Tensor] = {}  # eps as a 0-d tensor, by device: a new one costs an op


class FeedForward(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        hidden = int(2 * 4 * cfg.dim / 3)
        if cfg.ffn_dim_multiplier is not None:
            hidden = int(cfg.ffn_dim_multiplier * hidden)
        hidden = cfg.multiple_of * math.ceil(hidden / cfg.multiple_of)
        self.w1 = nn.Linear(cfg.dim, hidden, bias=False)
        self.w3 = nn.Linear(cfg.dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, cfg.dim, bias=False)

    def forward(self, x):
        gate, up = fused_product(self, W1_W3, x).chunk(2, -1)  # one product where the weights are fused
        return product(self.w2, F.silu(gate) * up)


def rope_angles(positions: torch.Tensor, head_dim: int, base: float) -> torch.Tensor:
    """positions [..., A] -> rotation angles [..., head_dim/2]; the pairs are split evenly over the A axes.

    Per axis this is standard RoPE over head_dim/A channels; for A = 2 it is LlamaGen's 2D table.
    """
    axes = positions.shape[-1]
    axis_dim = head_dim // axes
    freqs = 1.0 / base ** (torch.arange(0, axis_dim, 2, device=positions.device, dtype=torch.float64) / axis_dim)
    return torch.cat([positions[..., a, None].double() * freqs for a in range(axes)], -1)


def apply_rope(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """x [B, T, H, D] with interleaved pairs (x0, x1), (x2, x3)... rotated by unit complex numbers rot
    [B, T, 1, D/2] (or broadcastable): one complex product, in fp32 or better."""
    low = x.dtype not in (torch.float32, torch.float64)  # (no casts at all in the usual fp32 forward)
    pairs = torch.view_as_complex((x.float() if low else x).unflatten(-1, (-1, 2)))  # [B, T, H, D/2]
    out = torch.view_as_real(pairs * rot).flatten(-2)
    return out.type_as(x) if low else out


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        self.layer = layer
        self.n_head, self.n_kv_head = cfg.n_head, cfg.n_kv_head or cfg.n_head
        self.head_dim = cfg.dim // cfg.n_head
        self.wqkv = nn.Linear(cfg.dim, (self.n_head + 2 * self.n_kv_head) * self.head_dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x, rot, view: CacheView | None, mask: torch.Tensor | None, B: int, T: int):
        """x [B * T, D] (2D: every projection is one plain matmul) -> [B * T, D]."""
        H, Hkv = self.n_head, self.n_kv_head
        qkv = product(self.wqkv, x).view(B, T, H + 2 * Hkv, self.head_dim)  # [B, T, H + 2 Hkv, D]
        qk = apply_rope(qkv[:, :, : H + Hkv], rot).transpose(1, 2)  # queries and keys in one rotation [B, H+Hkv, T, D]
        q, k = qk[:, :H], qk[:, H:]
        v = qkv[:, :, H + Hkv:].transpose(1, 2)  # [B, Hkv, T, D]
        if view is not None:
            k, v = view.update(self.layer, k, v)
        if Hkv != H:
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)
        if k.dtype != q.dtype:  # a cache kept in another dtype than the model's
            k, v = k.type_as(q), v.type_as(q)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return product(self.wo, y.transpose(1, 2).reshape(B * T, -1))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        self.attention = Attention(cfg, layer)
        self.feed_forward = FeedForward(cfg)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, rot, view, mask, B, T):
        h = x + self.attention.forward(decode_norm(x, self.attention_norm.weight, self.attention_norm.eps),
                                       rot, view, mask, B, T)
        return h + self.feed_forward.forward(decode_norm(h, self.ffn_norm.weight, self.ffn_norm.eps))


class LabelEmbedder(nn.Module):
    """Class embedding, with an extra null row for CFG when trained with label dropout (LlamaGen)."""

    def __init__(self, num_classes: int, dim: int, null: bool):
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + null, dim)

    def forward(self, labels):
        return self.embedding_table(labels)[:, None]  # [B, 1, D]


class MLP(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden, bias=False)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden, out_features, bias=False)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class CaptionEmbedder(nn.Module):
    """Caption features [B, T, C] -> [B, T, D]; the null caption is the learned `uncond_embedding`."""

    def __init__(self, caption_dim: int, dim: int, token_num: int):
        super().__init__()
        self.cap_proj = MLP(caption_dim, dim, dim)
        self.register_buffer("uncond_embedding", torch.randn(token_num, caption_dim) / caption_dim**0.5)

    def forward(self, caption):
        return self.cap_proj(caption)


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        if cfg.num_classes:
            self.cls_embedding = LabelEmbedder(cfg.num_classes, cfg.dim, cfg.class_null)
        elif cfg.caption_dim:
            self.cls_embedding = CaptionEmbedder(cfg.caption_dim, cfg.dim, cfg.cond_len)
        else:
            self.cond_embeddings = nn.Embedding(cfg.cond_vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    @property
    def head_dim(self) -> int:
        return self.config.dim // self.config.n_head

    @property
    def has_null_condition(self) -> bool:
        return not self.config.num_classes or self.config.class_null

    def null_condition(self, batch: int) -> torch.Tensor:
        """The condition CFG mixes against: the null class, the learned null caption, or an all-pad prompt."""
        cfg, device = self.config, self.tok_embeddings.weight.device
        if not self.has_null_condition:
            raise ValueError("this model was trained without a null class (class_dropout_prob = 0): it cannot run CFG")
        if cfg.num_classes:
            return torch.full((batch,), cfg.num_classes, dtype=torch.long, device=device)
        if cfg.caption_dim:
            return self.cls_embedding.uncond_embedding.expand(batch, -1, -1)
        return torch.zeros(batch, cfg.cond_len, dtype=torch.long, device=device)

    def check_condition(self, cond: torch.Tensor) -> None:
        cfg = self.config
        if cfg.num_classes:
            top = cfg.num_classes + cfg.class_null
            if cond.dim() != 1 or cond.is_floating_point() or cond.min() < 0 or cond.max() >= top:
                raise ValueError(f"class condition must be ids [B] in [0, {top}), got {tuple(cond.shape)}")
        elif cfg.caption_dim:
            if cond.dim() != 3 or cond.shape[1:] != (cfg.cond_len, cfg.caption_dim):
                raise ValueError(f"caption condition must be features [B, {cfg.cond_len}, {cfg.caption_dim}], "
                                 f"got {tuple(cond.shape)}")
        elif (cond.dim() != 2 or cond.is_floating_point() or cond.shape[1] != cfg.cond_len or cond.min() < 0
              or cond.max() >= cfg.cond_vocab_size):
            raise ValueError(f"prompt condition must be ids [B, {cfg.cond_len}] in [0, {cfg.cond_vocab_size}), "
                             f"got {tuple(cond.shape)}")

    def embed_condition(self, cond: torch.Tensor) -> torch.Tensor:
        """cond: class ids [B], caption features [B, T, C] or prompt ids [B, P] -> prefix embeddings [B, P, D]."""
        self.check_condition(cond)
        if self.config.num_classes or self.config.caption_dim:
            return self.cls_embedding(cond.to(self.tok_embeddings.weight.dtype) if cond.is_floating_point() else cond)
        return self.cond_embeddings(cond)

    def rope_table(self, positions: torch.Tensor) -> torch.Tensor:
        """Layout positions [N, A] -> unit rotations [N + 1, head_dim/2] (complex): row i rotates generated
        token i, row N the condition tokens (LlamaGen's zero rotation, or none). Angles are computed once in
        fp64 and kept as complex64, or complex128 for an fp64 model, which is where `apply_rope` rotates."""
        ang = rope_angles(positions, self.head_dim, self.config.rope_base)  # [N, D/2] fp64
        cond = 0.0 if self.config.cond_rope == "zero" else 1.0
        rot = torch.cat([torch.polar(torch.ones_like(ang), ang), torch.full_like(ang[:1], cond).to(torch.complex128)])
        real = torch.promote_types(self.tok_embeddings.weight.dtype, torch.float32)
        return rot.to(torch.complex128 if real == torch.float64 else torch.complex64)

    def forward(self, h: torch.Tensor, rot: torch.Tensor, view: CacheView | None = None) -> torch.Tensor:
        """Embeddings h [B, T, D] rotated by rot [B, T, 1, D/2] (rows of `rope_table`), written to and attending
        through a cache `view` (or a plain causal pass) -> logits [B, T, V]."""
        return self.forward_features(h, rot, view)[0]

    def forward_features(self, h: torch.Tensor, rot: torch.Tensor, view: CacheView | None = None,
                         taps: tuple[int, ...] = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As `forward`, and the inputs of layers `taps` side by side, [B, T, len(taps) * D] (what a draft head
        reads: transformers' hidden_states[i] for i in taps), or None without taps."""
        B, T, D = h.shape
        if any(not 0 <= i <= len(self.layers) for i in taps):
            raise ValueError(f"features of layers {tuple(taps)} asked for; the model has {len(self.layers)} layers "
                             f"(0 .. {len(self.layers)}: each layer's input, then the normed output)")
        mask = torch.ones(T, T, dtype=torch.bool, device=h.device).tril() if view is None else view.bias(h.dtype)
        x = h.reshape(B * T, D)  # rows of tokens: each projection is one matmul, with no reshapes around it
        kept = {}  # layer -> its input [B * T, D]
        for i, layer in enumerate(self.layers):
            if i in taps:
                kept[i] = x
            x = layer.forward(x, rot, view, mask, B, T)
        x = decode_norm(x, self.norm.weight, self.norm.eps)
        kept[len(self.layers)] = x  # the last layer's output after the norm, as transformers' last hidden_states
        logits = product(self.output, x).view(B, T, -1)
        # in the taps' order, a layer named twice given twice (vLLM's default layers for a 6-layer target: 2, 3, 3)
        return logits, torch.cat([kept[i] for i in taps], -1).view(B, T, -1) if taps else None

    def forward_sequence(self, cond: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Teacher-forced pass without a cache (training, reference checks): condition ids, tokens [B, N]
        with their layout positions [N, A] -> logits [B, N, V] predicting every token."""
        prefix = self.embed_condition(cond)  # [B, P, D]
        P, N = prefix.shape[1], tokens.shape[1]
        h = torch.cat([prefix, self.tok_embeddings(tokens[:, :-1])], 1)
        rot = self.rope_table(positions.to(h.device))  # [N + 1, D/2]
        rows = torch.cat([torch.full((P,), N), torch.arange(N - 1)]).to(h.device)  # condition row, then tokens
        return self(h, rot[rows][None, :, None])[:, P - 1:]

    def new_cache(self, batch: int, max_len: int) -> StaticKVCache:
        cfg, w = self.config, self.tok_embeddings.weight
        return StaticKVCache(cfg.n_layer, batch, cfg.n_kv_head or cfg.n_head, max_len, self.head_dim,
                             dtype=w.dtype, device=w.device)

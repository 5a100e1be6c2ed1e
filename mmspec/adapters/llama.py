"""A lean forward for transformers' Llama (`LlamaForCausalLM`, or the `LlamaModel` decoder inside Janus): its weights
and its arithmetic, op for op, without the Python transformers runs around every op (module calls, keyword plumbing,
output classes, mask builders).

At one text row a decode step's products are small, and on a CPU that Python is a fifth of the forward (code-text,
6 layers of hidden size 256: 4.7 ms a one-token forward through transformers, 3.9 ms here, the same logits bit for bit).
Only what is known to compute the same runs here: a plain Llama (no attention or MLP biases, SiLU, RoPE with a fixed
table); anything else (other architectures, dynamic RoPE, quantized layers) keeps transformers' own forward.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mmspec.cache import CacheView
from mmspec.loading import GATE_UP, QKV, fused_product, product
from mmspec.reference.gpt import rms_norm

STATIC_ROPE = ("default", "linear", "llama3", "yarn")  # inverse frequencies fixed at load (not "dynamic", "longrope")


class LeanLlama:
    def __init__(self, decoder: nn.Module, lm_head: "nn.Linear | None"):
        cfg = decoder.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads or cfg.num_attention_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        self.layers, self.norm, self.rotary, self.lm_head = decoder.layers, decoder.norm, decoder.rotary_emb, lm_head

    @classmethod
    def of(cls, model: nn.Module) -> "LeanLlama | None":
        """The lean forward of a `LlamaForCausalLM` (-> logits) or of a `LlamaModel` (-> its last hidden state), or
        None where it would not compute what transformers computes."""
        from transformers import LlamaForCausalLM, LlamaModel

        if type(model) not in (LlamaForCausalLM, LlamaModel):  # a subclass may change any part
            return None
        decoder, lm_head = (model.model, model.lm_head) if type(model) is LlamaForCausalLM else (model, None)
        cfg, rotary = decoder.config, decoder.rotary_emb
        plain = (not getattr(cfg, "attention_bias", False) and not getattr(cfg, "mlp_bias", False)
                 and cfg.hidden_act == "silu" and getattr(cfg, "pretraining_tp", 1) == 1
                 and getattr(rotary, "rope_type", None) in STATIC_ROPE)
        linears = [getattr(part, name, None) for layer in decoder.layers
                   for part, names in ((layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                                       (layer.mlp, ("gate_proj", "up_proj", "down_proj"))) for name in names]
        if lm_head is not None:
            linears.append(lm_head)
        if not plain or any(type(m) is not nn.Linear or m.bias is not None for m in linears):
            return None  # quantized or otherwise replaced projections run through their own modules
        return cls(decoder, lm_head)

    def __call__(self, h: torch.Tensor, position_ids: torch.Tensor, view: CacheView,
                 taps: tuple[int, ...] = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Embeddings h [R, T, D] at position_ids [R, T] through the cache `view` -> (logits [R, T, V], or for a
        decoder its last hidden state after the norm [R, T, D]; the inputs of layers `taps` side by side
        [R, T, len(taps) * D], as transformers' hidden_states[i], or None)."""
        R, T, D = h.shape
        H, Hkv, hd = self.heads, self.kv_heads, self.head_dim
        if any(not 0 <= i <= len(self.layers) for i in taps):
            raise ValueError(f"features of layers {tuple(taps)} asked for (a draft head's); the model has "
                             f"{len(self.layers)} layers (0 .. {len(self.layers)}: each layer's input, then the "
                             "normed output)")
        freqs = position_ids[..., None].float() * self.rotary.inv_freq.float()  # [R, T, hd/2], as transformers
        angles = torch.cat([freqs, freqs], -1)
        scale = self.rotary.attention_scaling
        cos, sin = ((angles.cos() * scale).to(h.dtype)[:, :, None], (angles.sin() * scale).to(h.dtype)[:, :, None])
        x = h.reshape(R * T, D)  # rows of tokens: each projection is one plain matmul
        kept = {}
        for i, layer in enumerate(self.layers):
            if i in taps:
                kept[i] = x
            attn, mlp = layer.self_attn, layer.mlp
            y = rms_norm(x, layer.input_layernorm.weight, self.eps)
            qkv = fused_product(attn, QKV, y).view(R, T, H + 2 * Hkv, hd)
            qk = _rotate(qkv[:, :, :H + Hkv], cos, sin).transpose(1, 2)  # queries and keys in one rotation
            q, k, v = qk[:, :H], qk[:, H:], qkv[:, :, H + Hkv:].transpose(1, 2)  # [R, H or Hkv, T, hd]
            k, v = view.update(i, k, v)
            if Hkv != H:
                k, v = (t.repeat_interleave(H // Hkv, dim=1) for t in (k, v))
            a = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=view.bias(q.dtype),
                                               scale=getattr(attn, "scaling", hd ** -0.5))
            x = x + product(attn.o_proj, a.transpose(1, 2).reshape(R * T, H * hd))
            y = rms_norm(x, layer.post_attention_layernorm.weight, self.eps)
            gate, up = fused_product(mlp, GATE_UP, y).chunk(2, -1)
            x = x + product(mlp.down_proj, F.silu(gate) * up)
        x = rms_norm(x, self.norm.weight, self.eps)
        kept[len(self.layers)] = x
        out = (x if self.lm_head is None else product(self.lm_head, x)).view(R, T, -1)
        return out, torch.cat([kept[i] for i in taps], -1).view(R, T, -1) if taps else None


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """transformers' Llama RoPE on x [R, T, heads, hd]: pairs (i, i + hd/2), cos/sin [R, T, 1, hd]."""
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat([-x2, x1], -1) * sin

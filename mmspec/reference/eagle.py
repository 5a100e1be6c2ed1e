"""An EAGLE-3 draft head (Li et al. 2025, arXiv 2503.01840), in the layout of the published checkpoints.

The head reads the target's own features: hidden states of a low, a middle and a high layer at a
position, fused by `fc` into one vector, which with the embedding of the token sampled there goes
through one decoder layer (`midlayer`) whose output, after `norm`, gives `lm_head` logits for the
next token. Drafting further, the layer's own output (before `norm`) stands in for the fused
features. The names and shapes are those of the EAGLE-3 heads vLLM and SGLang serve for Llama
targets (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B), so such a folder loads key for key:

    fc.weight                           [H, 3 * H_target]
    midlayer.input_layernorm.weight     [H]        (the token embedding)
    midlayer.hidden_norm.weight         [H]        (the fused features / the last output)
    midlayer.self_attn.{q,k,v}_proj     [heads * head_dim, 2 * H]  (embedding and features side by side)
    midlayer.self_attn.o_proj           [H, heads * head_dim]
    midlayer.post_attention_layernorm   [H]
    midlayer.mlp.{gate,up,down}_proj    SwiGLU
    norm.weight                         [H]
    lm_head.weight                      [V_draft, H]
    d2t                                 [V_draft] target id = draft id + d2t[draft id]
    t2d                                 [V] which target ids the draft vocabulary holds
    embed_tokens.weight                 [V, H], optional: without it the target's own embedding is used

config.json is a Llama config (hidden_size, num_attention_heads, num_key_value_heads, head_dim,
intermediate_size, rms_norm_eps, rope_theta or rope_parameters, vocab_size, draft_vocab_size) and
may name the target layers it reads in `eagle_config.eagle_aux_hidden_state_layer_ids` (default, as
vLLM: 2, layers // 2, layers - 3). mmspec adds `rope_axes` (2 or 3 for token grids: RoPE pairs split
over the axes, as the reference GPT does) and `target_layers`. RoPE is Llama's (rotate-half pairs).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from mmspec.loading import (GATE_UP, QKV, check_folder, decode_layout, fused_product, load_strict, product,
                             read_safetensors)
from mmspec.reference.gpt import RMSNorm, decode_norm, rope_angles

ARCHITECTURE = "LlamaForCausalLMEagle3"


@dataclass
class HeadConfig:
    hidden_size: int
    num_attention_heads: int
    intermediate_size: int
    vocab_size: int  # the target's
    target_hidden_size: int
    target_layers: tuple[int, ...]  # target layers whose inputs are fused (hidden_states[i] in transformers' terms)
    draft_vocab_size: int | None = None  # None: the target's
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_axes: int = 1
    card: dict = field(default_factory=dict)  # how it was trained, its acceptance (written as-is to config.json)

    def __post_init__(self):
        self.target_layers = tuple(self.target_layers)
        self.draft_vocab_size = self.draft_vocab_size or self.vocab_size
        self.num_key_value_heads = self.num_key_value_heads or self.num_attention_heads
        self.head_dim = self.head_dim or self.hidden_size // self.num_attention_heads
        if len(self.target_layers) < 1:
            raise ValueError("a head reads at least one target layer")
        if self.head_dim % (2 * self.rope_axes):
            raise ValueError(f"head_dim {self.head_dim} must split into {self.rope_axes} rotary groups")

    @property
    def feature_size(self) -> int:
        return len(self.target_layers) * self.target_hidden_size

    def to_json(self) -> dict:
        raw = asdict(self)
        card = raw.pop("card")
        layers = list(raw.pop("target_layers"))
        return {"architectures": [ARCHITECTURE], "model_type": "llama", **raw, "target_layers": layers,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": layers}, **({"card": card} if card else {})}

    @classmethod
    def from_json(cls, raw: dict, target_layers: int | None = None, where: str = "config.json") -> "HeadConfig":
        """A published EAGLE-3 config or mmspec's own. target_layers: the target's depth, for vLLM's default
        choice of layers when the config names none."""
        arch = raw.get("architectures") or [ARCHITECTURE]
        if not any("Eagle3" in a for a in arch):
            raise ValueError(f"{where}: architectures {arch} is not an EAGLE-3 head")
        rope = raw.get("rope_scaling") or (raw.get("rope_parameters") or {})
        if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
            raise ValueError(f"{where}: RoPE scaling {rope.get('rope_type', rope.get('type'))!r} is not supported "
                             "(only plain RoPE)")
        layers = raw.get("target_layers") or (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        if layers is None:
            if target_layers is None:
                raise ValueError(f"{where} names no target layers (eagle_config.eagle_aux_hidden_state_layer_ids): "
                                 "load it with load_head(folder, target_layers=<the target's depth>) for vLLM's "
                                 "default layers")
            layers = (2, target_layers // 2, target_layers - 3)
        theta = raw.get("rope_theta") or (raw.get("rope_parameters") or {}).get("rope_theta") or 10000.0
        try:
            return cls(hidden_size=raw["hidden_size"], num_attention_heads=raw["num_attention_heads"],
                       intermediate_size=raw["intermediate_size"], vocab_size=raw["vocab_size"],
                       target_hidden_size=raw.get("target_hidden_size") or raw["hidden_size"],
                       target_layers=tuple(layers), draft_vocab_size=raw.get("draft_vocab_size"),
                       num_key_value_heads=raw.get("num_key_value_heads"), head_dim=raw.get("head_dim"),
                       rms_norm_eps=raw.get("rms_norm_eps", 1e-5), rope_theta=float(theta),
                       rope_axes=raw.get("rope_axes", 1), card=raw.get("card", {}))
        except KeyError as err:
            raise ValueError(f"{where} lacks {err.args[0]!r}, which an EAGLE-3 head config has") from None


class _Attention(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        H, Hkv, hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.q_proj = nn.Linear(2 * cfg.hidden_size, H * hd, bias=False)
        self.k_proj = nn.Linear(2 * cfg.hidden_size, Hkv * hd, bias=False)
        self.v_proj = nn.Linear(2 * cfg.hidden_size, Hkv * hd, bias=False)
        self.o_proj = nn.Linear(H * hd, cfg.hidden_size, bias=False)
        self.heads, self.kv_heads, self.head_dim = H, Hkv, hd


class _MLP(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        gate, up = fused_product(self, GATE_UP, x).chunk(2, -1)  # one product where the weights are fused
        return product(self.down_proj, F.silu(gate) * up)


class _MidLayer(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.self_attn = _Attention(cfg)
        self.mlp = _MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Llama's RoPE: x [R, T, H, D] with pairs (i, i + D/2), cos/sin [R, T, 1, D]."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


class EagleHead(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.config = cfg
        self.fc = nn.Linear(cfg.feature_size, cfg.hidden_size, bias=False)
        self.midlayer = _MidLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(cfg.vocab_size, dtype=torch.bool)[: cfg.vocab_size])
        self.embed_tokens: nn.Embedding | None = None  # None: the target's embedding (set by the caller)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layout positions [..., A] -> (cos, sin) [..., 1, head_dim] (fp32)."""
        ang = rope_angles(positions, self.config.head_dim, self.config.rope_theta).float()  # [..., hd/2]
        ang = torch.cat([ang, ang], -1)[..., None, :]
        return ang.cos(), ang.sin()

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor,
                rope: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """A causal pass over T pairs without a cache: token embeddings [R, T, H] and the features before them
        [R, T, F] (the target's, fused here, or the head's own last outputs [R, T, H]) -> (outputs before `norm`
        [R, T, H], logits over the draft vocabulary [R, T, V_draft]). Drafting runs the same layer through a
        cache (mmspec.drafters.eagle.HeadSession), training through `qkv` and `attend` with its own mask."""
        hidden = self.fuse(hidden)
        q, k, v = self.qkv(embeds, hidden, rope)
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
        return self.attend(hidden, q, k, v, mask)

    def fuse(self, hidden: torch.Tensor) -> torch.Tensor:
        """The target's features [.., F] -> [.., H] through `fc`; the head's own outputs pass as they are."""
        cfg = self.config
        fused = hidden.shape[-1] == cfg.feature_size and cfg.feature_size != cfg.hidden_size
        return product(self.fc, hidden) if fused else hidden

    def qkv(self, embeds: torch.Tensor, hidden: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]):
        """Pairs of embeddings and (fused) features [R, T, H] -> queries [R, heads, T, hd], keys and values
        [R, kv_heads, T, hd], RoPE applied (cos/sin broadcastable to [R, T, 1, hd])."""
        attn, layer = self.midlayer.self_attn, self.midlayer
        R, T, _ = embeds.shape
        eps = self.config.rms_norm_eps
        x = torch.cat([decode_norm(embeds, layer.input_layernorm.weight, eps),
                       decode_norm(hidden, layer.hidden_norm.weight, eps)], -1)  # [R, T, 2H]
        H, Hkv = attn.heads, attn.kv_heads
        qkv = fused_product(attn, QKV, x).view(R, T, H + 2 * Hkv, -1)
        qk = rotate(qkv[:, :, :H + Hkv], *rope).transpose(1, 2)  # queries and keys in one rotation
        return qk[:, :H], qk[:, H:], qkv[:, :, H + Hkv:].transpose(1, 2)

    def attend(self, hidden: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention of q over keys k, v (mask [.., T, S] True = seen), then the residual, MLP, norm and lm_head.
        (Functions of the modules' weights, not module calls: as in the reference GPT, a call's Python costs more than
        a one-token step's small products.)"""
        attn, layer, eps = self.midlayer.self_attn, self.midlayer, self.config.rms_norm_eps
        if attn.kv_heads != attn.heads:
            k, v = (t.repeat_interleave(attn.heads // attn.kv_heads, 1) for t in (k, v))
        y = F.scaled_dot_product_attention(q, k.type_as(q), v.type_as(q), attn_mask=mask)
        R, _, T, _ = q.shape
        h = hidden + product(attn.o_proj, y.transpose(1, 2).reshape(R, T, -1))
        out = h + layer.mlp.forward(decode_norm(h, layer.post_attention_layernorm.weight, eps))
        return out, product(self.lm_head, decode_norm(out, self.norm.weight, eps))

    def maps_vocabulary(self) -> bool:
        """Whether the draft vocabulary differs from the target's (a smaller one, or ids moved by `d2t`)."""
        return self.config.draft_vocab_size != self.config.vocab_size or bool(self.d2t.any())

    def to_target(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary [..., V_draft] -> over the target's [..., V]."""
        return self.scatter_vocabulary(logits) if self.maps_vocabulary() else logits

    def scatter_vocabulary(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [..., V_draft] placed at their target ids (d2t) [..., V]: ids outside the draft
        vocabulary get a large finite negative logit (finite, so CFG's differences stay finite)."""
        ids = torch.arange(self.config.draft_vocab_size, device=logits.device) + self.d2t  # [V_draft] target ids
        out = logits.new_full((*logits.shape[:-1], self.config.vocab_size), -1e9)
        return out.index_copy_(-1, ids, logits)


def save_head(head: EagleHead, path: str | Path, dtype: torch.dtype | None = torch.bfloat16) -> Path:
    """Write a head folder: config.json (EAGLE-3 keys, the card) and model.safetensors (bf16 by default; the
    vocabulary maps stay integers)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(head.config.to_json(), indent=2))
    sd = {k: (v.to(dtype) if dtype is not None and v.is_floating_point() else v).contiguous()
          for k, v in head.state_dict().items()}
    save_file(sd, str(path / "model.safetensors"))
    return path


def load_head(path: str | Path, target_layers: int | None = None, dtype: torch.dtype = torch.float32,
              device="cpu") -> EagleHead:
    """A head folder (mmspec's or a published EAGLE-3 one) -> EagleHead; strict: every weight with its shape, no
    others but an optional `embed_tokens.weight`. target_layers: the target's depth (see HeadConfig.from_json)."""
    path = check_folder(path, "EAGLE-3 head")
    cfg = HeadConfig.from_json(json.loads((path / "config.json").read_text()), target_layers,
                               str(path / "config.json"))
    head = EagleHead(cfg)
    sd: dict[str, torch.Tensor] = {}
    for file in sorted(path.glob("*.safetensors")):
        sd.update(read_safetensors(file))
    embed = sd.pop("embed_tokens.weight", None)
    load_strict(head, sd, str(path), optional=frozenset({"d2t", "t2d"}))  # a full draft vocabulary needs no maps
    if embed is not None:
        head.embed_tokens = nn.Embedding.from_pretrained(embed.float(), freeze=True)
    return decode_layout(head.to(device=device, dtype=dtype).eval())

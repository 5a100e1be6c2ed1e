"""Lumina-mGPT's own rules, restated for the tests: its logits processors (CFG, image tokens, top-k) over
transformers' generate, its per-shard q/k LayerNorm, and a tiny model folder in the layout its own
`ChameleonForConditionalGeneration` saves."""
import copy
import json

import torch
import torch.nn.functional as F
from transformers import LogitsProcessor, LogitsProcessorList

from tiny import C_BOI, C_EOI, C_PAD, C_ROW_END, tiny_chameleon_folder


def generating(model):
    """The model with image generation switched on, as Lumina-mGPT's own Chameleon code has it: transformers'
    forward sets image tokens' logits to the lowest value, and with no image tokens listed it masks nothing."""
    model = copy.deepcopy(model)
    model.model.vocabulary_mapping.__dict__["image_tokens"] = []
    return model


class LuminaCFG(LogitsProcessor):
    """Lumina-mGPT's CFG, restated: once an image has started (BOI and both resolution tokens generated or given),
    the unconditional sequence is the image alone, from BOI on, and raw logits mix as u + s (c - u)."""

    def __init__(self, model, scale):
        self.model, self.scale = model, scale

    def __call__(self, input_ids, scores):
        start = (input_ids[0] == C_BOI).nonzero()[-1].item()
        with torch.no_grad():
            u = self.model(input_ids[:, start:]).logits[:, -1]
        return self.scale * (scores - u) + u


class LuminaImageTokens(LogitsProcessor):
    """Lumina-mGPT's constraint, restated: after a full row of w image tokens the row end, after h rows EOI, and
    otherwise image tokens only (every other logit -inf)."""

    def __init__(self, image_tokens, h, w):
        self.image, self.h, self.w = torch.tensor(list(image_tokens)), h, w

    def __call__(self, input_ids, scores):
        start = (input_ids[0] == C_BOI).nonzero()[-1].item()
        n = input_ids.shape[1] - start - 3 + 1  # the index (from 1) of the token chosen now, after the resolution
        forced = C_ROW_END if n % (self.w + 1) == 0 else C_EOI if n == (self.w + 1) * self.h + 1 else None
        out = torch.full_like(scores, -torch.inf)
        if forced is not None:
            out[:, forced] = 0
        else:
            out[:, self.image] = scores[:, self.image]
        return out


class LuminaTopK(LogitsProcessor):
    """Lumina-mGPT's top-k inside an image: keep the k highest scores."""

    def __init__(self, k):
        self.k = k

    def __call__(self, input_ids, scores):
        kth = scores.topk(min(self.k, scores.shape[-1])).values[..., -1:]
        return scores.masked_fill(scores < kth, -torch.inf)


def lumina_generate(model, ids: list[int], image_tokens, h: int, w: int, scale: float, k: int) -> torch.Tensor:
    """Greedy: transformers' generate on one prompt ending with the image start, with Lumina-mGPT's processors, on
    `model` with generation switched on -> the generated tokens [1, h (w + 1) + 1]."""
    ids = torch.tensor([ids])
    processors = LogitsProcessorList([LuminaCFG(model, scale), LuminaImageTokens(image_tokens, h, w), LuminaTopK(k)])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=h * (w + 1) + 1, do_sample=False,
                         logits_processor=processors, pad_token_id=C_PAD, eos_token_id=None)
    return out[:, ids.shape[1]:]


class ShardNorm(torch.nn.Module):
    """Lumina-mGPT's q/k LayerNorm (its modeling_chameleon.py), restated: statistics over each head's last dimension,
    then weight and bias [shards, head_dim] repeat-interleaved over the heads of each shard."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, heads: int):
        super().__init__()
        self.weight, self.bias = torch.nn.Parameter(weight), torch.nn.Parameter(bias)
        self.per_shard = heads // weight.shape[0]

    def forward(self, x):  # [N, heads, head_dim]
        x = F.layer_norm(x, x.shape[-1:], None, None, eps=1e-5)
        return x * self.weight.repeat_interleave(self.per_shard, 0) + self.bias.repeat_interleave(self.per_shard, 0)


def lumina_folder(path, shards: int, image_size: int = 32):
    """A tiny Chameleon folder as Lumina-mGPT's own class saves it (q/k norms a row per model-parallel shard, its
    config's model_parallel_size, architecture and extra fields), with tokenizer.json and vqgan/ as mmspec's Chameleon
    folders hold them -> Lumina-mGPT's model of those weights (transformers' decoder with `ShardNorm`s, generation
    on)."""
    from safetensors.torch import load_file, save_file

    model = tiny_chameleon_folder(path, image_size=image_size)
    file = path / "model.safetensors"
    sd = load_file(str(file))
    for i, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        for name, heads in (("q_norm", attn.num_heads), ("k_norm", attn.num_key_value_heads)):
            norm = getattr(attn, name)
            rows = slice(None, None, heads // shards)  # each shard's first head's row
            weight, bias = norm.weight.detach()[rows].clone(), norm.bias.detach()[rows].clone()  # [shards, head_dim]
            prefix = f"model.layers.{i}.self_attn.{name}"
            sd[f"{prefix}.weight"], sd[f"{prefix}.bias"] = weight, bias
            setattr(attn, name, ShardNorm(weight, bias, heads))
    save_file(sd, str(file), metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    config.update(architectures=["ChameleonXLLMXForConditionalGeneration"], model_parallel_size=shards,
                  mask_image_logits=False, z_loss_weight=1e-5, swin_norm=False)
    (path / "config.json").write_text(json.dumps(config))
    return generating(model)

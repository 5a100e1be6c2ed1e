"""Chameleon weights as Lumina-mGPT's own `ChameleonForConditionalGeneration` saves them, read in transformers' layout.

Lumina-mGPT's attention normalises each head's queries and keys with a LayerNorm whose weight and bias hold one row
per model-parallel shard, [model_parallel_size, head_dim], and repeat-interleaves the rows over the shard's heads at
run time (its model/chameleon/modeling_chameleon.py, `ChameleonLayerNorm.repeat_param`). transformers' class holds
one row per head: q_norm [num_attention_heads, head_dim], k_norm [num_key_value_heads, head_dim]. The rest of the
folder is transformers' layout key for key. Anole's and transformers' own folders hold per-head rows already.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

NORM = re.compile(r"^model\.layers\.\d+\.self_attn\.(q_norm|k_norm)\.(weight|bias)$")


def per_head_norms(path: "str | Path", config) -> dict[str, torch.Tensor]:
    """The folder's q/k norms stored one row per shard, expanded to one row per head ({} where every one is per head
    already); a norm of another shape is refused in one line naming it, before any weight is read."""
    from safetensors import safe_open

    head_dim = config.hidden_size // config.num_attention_heads
    heads = {"q_norm": config.num_attention_heads, "k_norm": config.num_key_value_heads}
    shards = getattr(config, "model_parallel_size", 1) or 1
    found: list[tuple[Path, str, int]] = []  # (file, key, heads) of the per-shard norms
    for file in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                if not (m := NORM.match(key)):
                    continue
                shape, n = list(f.get_slice(key).get_shape()), heads[m[1]]
                if shape == [n, head_dim]:
                    continue
                if shape != [shards, head_dim] or n % shards:
                    raise ValueError(
                        f"{file}: {key} is {shape}; Chameleon reads [{n}, {head_dim}] (a row per head, transformers' "
                        f"layout) or [model_parallel_size, {head_dim}] (a row per shard, Lumina-mGPT's) with "
                        f"model_parallel_size dividing the {n} heads, and config.json says model_parallel_size "
                        f"{shards}")
                found.append((file, key, n))
    out = {}
    for file, key, n in found:  # (read only once every norm's shape passed)
        with safe_open(str(file), framework="pt") as f:
            out[key] = f.get_tensor(key).repeat_interleave(n // shards, dim=0)  # [shards, d] -> [n, d]
    return out

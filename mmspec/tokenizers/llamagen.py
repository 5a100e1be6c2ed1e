"""LlamaGen's VQ tokenizers (VQ-16, VQ-8) as diffusers `VQModel`s.

LlamaGen's VQ (`tokenizer/tokenizer_image/vq_model.py`, MIT; after taming-transformers) is the
taming VQGAN layout that diffusers' VQModel also implements: the weights map key for key (1x1 conv
attention projections become linear layers), and the codebook, which LlamaGen L2-normalises on
every lookup, is stored normalised so diffusers' plain lookup decodes the same pixels.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch.nn.functional as F

from mmspec.reference.checkpoint import read_llamagen_state_dict
from mmspec.tokenizers.pixels import llamagen_pixels
from mmspec.tokenizers.vq import VQTokenizer

VQ_MODELS = {"VQ-16": (1, 1, 2, 2, 4), "VQ-8": (1, 2, 2, 4)}

_RULES = [  # LlamaGen key -> diffusers key, in order
    (r"^(encoder|decoder)\.mid\.0\.", r"\1.mid_block.resnets.0."),
    (r"^(encoder|decoder)\.mid\.1\.", r"\1.mid_block.attentions.0."),
    (r"^(encoder|decoder)\.mid\.2\.", r"\1.mid_block.resnets.1."),
    (r"^encoder\.conv_blocks\.(\d+)\.downsample\.", r"encoder.down_blocks.\1.downsamplers.0."),
    (r"^decoder\.conv_blocks\.(\d+)\.upsample\.", r"decoder.up_blocks.\1.upsamplers.0."),
    (r"^encoder\.conv_blocks\.(\d+)\.res\.", r"encoder.down_blocks.\1.resnets."),
    (r"^decoder\.conv_blocks\.(\d+)\.res\.", r"decoder.up_blocks.\1.resnets."),
    (r"^encoder\.conv_blocks\.(\d+)\.attn\.", r"encoder.down_blocks.\1.attentions."),
    (r"^decoder\.conv_blocks\.(\d+)\.attn\.", r"decoder.up_blocks.\1.attentions."),
    (r"\.nin_shortcut\.", ".conv_shortcut."),
    (r"(attentions\.\d+)\.norm\.", r"\1.group_norm."),
    (r"(attentions\.\d+)\.q\.", r"\1.to_q."),
    (r"(attentions\.\d+)\.k\.", r"\1.to_k."),
    (r"(attentions\.\d+)\.v\.", r"\1.to_v."),
    (r"(attentions\.\d+)\.proj_out\.", r"\1.to_out.0."),
    (r"^(encoder|decoder)\.norm_out\.", r"\1.conv_norm_out."),
]


def diffusers_key(key: str) -> str:
    for pattern, repl in _RULES:
        key = re.sub(pattern, repl, key)
    return key


def llamagen_vq(ch_mult=(1, 1, 2, 2, 4), codebook_size: int = 16384, embed_dim: int = 8, z_channels: int = 256,
                ch: int = 128):
    """An empty diffusers VQModel shaped like LlamaGen's VQ."""
    from diffusers import VQModel

    n = len(ch_mult)
    return VQModel(block_out_channels=tuple(ch * m for m in ch_mult), layers_per_block=2,
                   down_block_types=("DownEncoderBlock2D",) * (n - 1) + ("AttnDownEncoderBlock2D",),
                   up_block_types=("AttnUpDecoderBlock2D",) + ("UpDecoderBlock2D",) * (n - 1),
                   latent_channels=z_channels, num_vq_embeddings=codebook_size, vq_embed_dim=embed_dim,
                   norm_num_groups=32)


def load_llamagen_vq(file: str | Path, model: "str | tuple[int, ...]" = "VQ-16", allow_pickle: bool = False,
                     **config) -> VQTokenizer:
    """A LlamaGen VQ checkpoint ({"model": sd}, .pt only with allow_pickle) -> a VQTokenizer over a
    diffusers VQModel; `decode(codes [B, h, w])` gives LlamaGen's `decode_code` pixels in [-1, 1], `decode_pil` the
    pictures its sampling scripts write (`llamagen_pixels`). `model` is a VQ_models name or its channel multipliers."""
    if isinstance(model, str) and model not in VQ_MODELS:
        raise ValueError(f"unknown LlamaGen VQ {model!r}; choose one of {sorted(VQ_MODELS)}")
    vq = llamagen_vq(VQ_MODELS[model] if isinstance(model, str) else model, **config)
    sd = {diffusers_key(k): v for k, v in read_llamagen_state_dict(file, allow_pickle).items()
          if k != "quantize.codebook_used"}
    sd["quantize.embedding.weight"] = F.normalize(sd["quantize.embedding.weight"].float(), dim=-1)
    load_vq_weights(vq, sd, f"{file} ({model})")
    return VQTokenizer(vq, pixels=llamagen_pixels)


def convert_llamagen_vq(file: str | Path, out: str | Path, model: "str | tuple[int, ...]" = "VQ-16",
                        allow_pickle: bool = False, **config) -> Path:
    """A LlamaGen VQ checkpoint -> a diffusers VQModel folder at `out` (safetensors, codebook L2-normalised): put it
    in the converted LlamaGen GPT's folder as vq/, where its pipeline finds it."""
    load_llamagen_vq(file, model, allow_pickle, **config).vq.save_pretrained(out, safe_serialization=True)
    return Path(out)


def load_vq_weights(vq, sd: dict, source: str) -> None:
    """Weights under diffusers' VQModel names into `vq`, every one of them and no other: taming's 1x1 convolutions
    of the attention blocks become the linear layers diffusers has there."""
    expected = vq.state_dict()
    sd = {k: v.reshape(expected[k].shape) if k in expected and v.dim() == 4 and expected[k].dim() == 2 else v
          for k, v in sd.items()}
    missing, unexpected = sorted(set(expected) - set(sd)), sorted(set(sd) - set(expected))
    shapes = [k for k in expected if k in sd and sd[k].shape != expected[k].shape]
    if missing or unexpected or shapes:
        raise ValueError(f"the VQ weights in {source} do not match its config: missing {missing[:4]}, "
                         f"unexpected {unexpected[:4]}, shape mismatches {shapes[:4]}")
    vq.load_state_dict(sd)

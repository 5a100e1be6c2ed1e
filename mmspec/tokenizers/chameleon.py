"""Chameleon's image tokenizer (Meta's `vqgan.ckpt` + `vqgan.yaml`, which Lumina-mGPT and Anole decode with) as a
diffusers `VQModel`.

It is a taming-transformers VQGAN, the layout diffusers' VQModel implements: the encoder's `down.{i}`, the
decoder's `up.{i}` (taming numbers them from the highest resolution up, diffusers' `up_blocks` from the lowest, so
the index turns around), `mid.block_1 / attn_1 / block_2` and attention at the resolutions the yaml lists map
key for key, through LlamaGen's names (mmspec.tokenizers.llamagen), which follow the same taming layout. The
codebook is used as stored (no normalisation). transformers' `ChameleonVQVAE` holds the same encoder but no decoder.
"""
from __future__ import annotations

import re
from pathlib import Path

from mmspec.reference.checkpoint import read_llamagen_state_dict
from mmspec.tokenizers.llamagen import diffusers_key, load_vq_weights
from mmspec.tokenizers.pixels import chameleon_pixels
from mmspec.tokenizers.vq import VQTokenizer

VQGAN_FOLDER = "vqgan"  # where a Chameleon model folder keeps its converted VQGAN


def read_yaml_config(file: "str | Path") -> dict:
    """vqgan.yaml -> model.params (embed_dim, n_embed, ddconfig)."""
    import yaml

    file = Path(file)
    if not file.is_file():
        raise FileNotFoundError(f"no VQGAN config at {file} (Chameleon's vqgan.yaml)")
    params = ((yaml.safe_load(file.read_text()) or {}).get("model") or {}).get("params") or {}
    if not {"embed_dim", "n_embed", "ddconfig"} <= set(params):
        raise ValueError(f"{file} is not a taming VQGAN config: model.params needs embed_dim, n_embed and ddconfig")
    return params


def chameleon_vq(params: dict):
    """An empty diffusers VQModel shaped as a taming VQGAN config's model.params says."""
    from diffusers import VQModel

    dd = params["ddconfig"]
    mult, attn, res = tuple(dd["ch_mult"]), set(dd.get("attn_resolutions") or ()), dd["resolution"]
    n = len(mult)
    attends = [res // 2 ** i in attn for i in range(n)]  # by taming level, from the highest resolution
    return VQModel(in_channels=dd.get("in_channels", 3), out_channels=dd.get("out_ch", 3),
                   block_out_channels=tuple(dd["ch"] * m for m in mult), layers_per_block=dd["num_res_blocks"],
                   down_block_types=tuple("AttnDownEncoderBlock2D" if a else "DownEncoderBlock2D" for a in attends),
                   up_block_types=tuple("AttnUpDecoderBlock2D" if a else "UpDecoderBlock2D" for a in attends[::-1]),
                   latent_channels=dd["z_channels"], num_vq_embeddings=params["n_embed"],
                   vq_embed_dim=params["embed_dim"], norm_num_groups=32, sample_size=res)


def llamagen_name(key: str, levels: int) -> str:
    """A taming VQGAN key -> LlamaGen's name for the same weight (whose decoder counts from the lowest resolution)."""
    key = re.sub(r"^(encoder|decoder)\.mid\.block_1\.", r"\1.mid.0.", key)
    key = re.sub(r"^(encoder|decoder)\.mid\.attn_1\.", r"\1.mid.1.", key)
    key = re.sub(r"^(encoder|decoder)\.mid\.block_2\.", r"\1.mid.2.", key)
    key = re.sub(r"^encoder\.down\.(\d+)\.block\.", r"encoder.conv_blocks.\1.res.", key)
    key = re.sub(r"^encoder\.down\.", "encoder.conv_blocks.", key)
    if m := re.match(r"^decoder\.up\.(\d+)\.(block|attn|upsample)(.*)", key):
        part = {"block": "res"}.get(m[2], m[2])
        key = f"decoder.conv_blocks.{levels - 1 - int(m[1])}.{part}{m[3]}"
    return key


def load_chameleon_vq(checkpoint: "str | Path", config: "str | Path", allow_pickle: bool = False) -> VQTokenizer:
    """Chameleon's vqgan.ckpt (a Lightning checkpoint: {"state_dict": ...}, read with torch's weights-only unpickler
    only with allow_pickle; or safetensors) and its vqgan.yaml -> a VQTokenizer over a diffusers VQModel, whose
    `decode(codes [B, h, w])` gives the VQGAN's pixels in [-1, 1], `decode_pil` Lumina-mGPT's pictures
    (`chameleon_pixels`). The training loss's weights (`loss.*`) are left."""
    params = read_yaml_config(config)
    vq = chameleon_vq(params)
    levels = len(params["ddconfig"]["ch_mult"])
    sd = {diffusers_key(llamagen_name(k, levels)): v for k, v in read_llamagen_state_dict(checkpoint, allow_pickle).items()
          if not k.startswith("loss.")}
    load_vq_weights(vq, sd, str(checkpoint))
    return VQTokenizer(vq, pixels=chameleon_pixels)


def convert_chameleon_vq(checkpoint: "str | Path", config: "str | Path", out: "str | Path",
                         allow_pickle: bool = False) -> Path:
    """Write Chameleon's VQGAN as a diffusers VQModel folder (config.json + safetensors) that
    `VQTokenizer.from_pretrained` loads; a Chameleon model folder keeps it in its `vqgan/`."""
    load_chameleon_vq(checkpoint, config, allow_pickle).vq.save_pretrained(out, safe_serialization=True)
    return Path(out)

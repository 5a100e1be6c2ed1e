"""Cosmos model folders (config.json + model.safetensors + tokenizer/) and NVIDIA's released checkpoints.

config.json is {"model_type": "mmspec-cosmos", "cosmos": CosmosConfig fields, "tokenizer": "tokenizer",
"default_sampling": {...}}. A folder loads strictly: every weight the config implies, with its shape, and no other.
NVIDIA releases `model.pt` (a pickle of {"model": state dict}, keys prefixed "model."): it is read only with
`allow_pickle=True`, and then through torch's weights-only unpickler; `convert_cosmos` writes it once as a folder.
"""
from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import torch
from safetensors.torch import save_file

from mmspec.loading import check_folder, decode_layout, load_strict, read_checkpoint, read_safetensors
from mmspec.reference.cosmos import Cosmos, CosmosConfig

MODEL_TYPE = "mmspec-cosmos"
# Cosmos's inference defaults (cosmos1/models/autoregressive/utils/inference.py: --temperature 1.0, --top_p 0.8)
COSMOS_SAMPLING = {"temperature": 1.0, "top_p": 0.8}
# get_model_arch_specs / create_inference_config: 5B and 13B are the 4B and 12B with cross-attention
_BASE = {"n_kv_heads": 8, "norm_eps": 1e-5, "ffn_hidden_size": 14336, "rope_theta": 500000.0,
         "use_qk_normalization": True, "vocab_size": 64000}
_SIZES = {"4b": {"n_layers": 16, "dim": 4096, "n_heads": 32},
          "12b": {"n_layers": 40, "dim": 5120, "n_heads": 32, "head_dim": 128, "apply_yarn": True,
                  "original_latent_shape": [3, 40, 64], "yarn_scale": 2.0, "yarn_beta_fast": 4.0,
                  "yarn_beta_slow": 1.0}}
_VIDEO2WORLD = {"insert_cross_attn": True, "insert_cross_attn_every_k_layers": 1, "context_dim": 1024,
                "apply_abs_pos_emb": True, "bov_token": 64000, "embedding_size": 64064}  # 64000 + <bov>, to 64s
COSMOS_MODELS = {"4b": "4b", "12b": "12b", "5b": "4b", "13b": "12b"}  # name -> its base transformer
# 33 frames of 640 x 1024 through DV8x16x16: 5 latent frames of 40 x 64 tokens
DEFAULT_LATENT_SHAPE = (5, 40, 64)
_NOT_WEIGHTS = ("_extra_state",)  # TransformerEngine's FP8 bookkeeping


def cosmos_config(model: str = "4b", latent_shape=DEFAULT_LATENT_SHAPE) -> CosmosConfig:
    """The config of a released Cosmos-1 autoregressive model: 4b, 12b (base), 5b, 13b (Video2World)."""
    name = model.lower().removeprefix("cosmos-1.0-autoregressive-").removesuffix("-video2world")
    if name not in COSMOS_MODELS:
        raise ValueError(f"unknown Cosmos model {model!r}; choose one of {sorted(COSMOS_MODELS)}")
    extra = _VIDEO2WORLD if COSMOS_MODELS[name] != name else {}
    return CosmosConfig(**_BASE, **_SIZES[COSMOS_MODELS[name]], **extra, latent_shape=list(latent_shape))


def save_cosmos(model: Cosmos, path: "str | Path", dtype: torch.dtype | None = None, **extra) -> None:
    _write(model.config, model.state_dict(), path, dtype, **extra)


def _write(config: CosmosConfig, state_dict: dict, path: "str | Path", dtype=None, **extra) -> None:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    body = {"model_type": MODEL_TYPE, "cosmos": config.to_dict(), "default_sampling": COSMOS_SAMPLING, **extra}
    (path / "config.json").write_text(json.dumps(body, indent=2))
    sd = {k: (v.to(dtype) if dtype is not None else v).contiguous() for k, v in state_dict.items()}
    save_file(sd, str(path / "model.safetensors"))


def load_cosmos_config(path: "str | Path") -> CosmosConfig:
    raw = json.loads((Path(path) / "config.json").read_text())
    if raw.get("model_type") != MODEL_TYPE or not isinstance(raw.get("cosmos"), dict):
        raise ValueError(f"{path} is not an mmspec Cosmos folder (config.json needs model_type {MODEL_TYPE!r} and a "
                         "'cosmos' section)")
    raw = raw["cosmos"]
    unknown = set(raw) - {f.name for f in fields(CosmosConfig)}
    if unknown:
        raise ValueError(f"{path}/config.json has unknown fields {sorted(unknown)}")
    try:
        return CosmosConfig(**raw)
    except TypeError as err:
        raise ValueError(f"{path}/config.json: its 'cosmos' section is incomplete ({err})") from None


def load_cosmos(path: "str | Path", dtype: torch.dtype = torch.float32, device="cpu") -> Cosmos:
    """A Cosmos folder's model, on `device` in `dtype`: built without weights (meta) and given the file's tensors
    moved there one by one, so that no fp32 copy of a 12B model passes through host memory on the way to a GPU."""
    path = check_folder(path, "Cosmos model")
    sd = read_safetensors(path / "model.safetensors")
    with torch.device("meta"):
        model = Cosmos(load_cosmos_config(path))
    load_strict(model, {k: v.to("meta") for k, v in sd.items()}, str(path))  # keys and shapes: nothing copied
    model.load_state_dict({k: v.to(device=device, dtype=dtype) for k, v in sd.items()}, assign=True)
    return decode_layout(model.eval())


def read_cosmos_state_dict(file: "str | Path", allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """A released Cosmos checkpoint -> the transformer's state dict ({"model": sd} or a raw sd; "model." prefixes and
    TransformerEngine's "_extra_state" entries dropped)."""
    sd = read_checkpoint(file, allow_pickle, "mmspec convert cosmos")
    if isinstance(sd, dict) and isinstance(sd.get("model"), dict):
        sd = sd["model"]
    return {k.removeprefix("model."): v for k, v in sd.items() if not any(s in k for s in _NOT_WEIGHTS)}


def convert_cosmos(file: "str | Path", out: "str | Path", allow_pickle: bool = False,
                   model: "str | CosmosConfig" = "4b", latent_shape=DEFAULT_LATENT_SHAPE,
                   tokenizer: "str | Path | None" = None, text_encoder: "str | Path | None" = None) -> Path:
    """A released Cosmos checkpoint -> a Cosmos folder (safetensors in the checkpoint's dtype + config.json), checked
    key for key and shape for shape against the config of `model` (a released model's name, or a CosmosConfig),
    without building it (a meta model). `tokenizer`: NVIDIA's tokenizer folder (Cosmos-1.0-Tokenizer-DV8x16x16:
    encoder.jit, decoder.jit), copied into tokenizer/ with the model's code count; `text_encoder`: a local T5 encoder
    folder (transformers, safetensors) for text prompts, named in config.json (not copied: T5-11B's encoder is
    large)."""
    config = model if isinstance(model, CosmosConfig) else cosmos_config(model, latent_shape)
    sd = read_cosmos_state_dict(file, allow_pickle)
    with torch.device("meta"):
        skeleton = Cosmos(config)
    load_strict(skeleton, {k: v.to("meta") for k, v in sd.items()}, str(file))
    extra = {}
    if tokenizer is not None:
        from mmspec.tokenizers.cosmos import write_tokenizer_folder

        # the tokenizer's codes are the transformer's output rows (checked against the config above)
        write_tokenizer_folder(tokenizer, Path(out) / "tokenizer", vocab_size=sd["output.weight"].shape[0])
        extra["tokenizer"] = "tokenizer"
    if text_encoder is not None:
        extra["text_encoder"] = str(Path(text_encoder).resolve())
    _write(config, sd, out, **extra)
    return Path(out)


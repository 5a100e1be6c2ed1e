"""Reference GPT folders (config.json + model.safetensors) and LlamaGen checkpoints.

config.json is {"model_type": "mmspec-gpt", "gpt": GPTConfig fields, ...}; pipelines keep their own
entries (layout, tokenizer, prompt vocabulary, default sampling) beside "gpt".

A folder is loaded strictly: every weight the config implies must be there with its shape, and no
other. LlamaGen releases `.pt` files (pickles): they load only with `allow_pickle=True`, and even
then through torch's weights-only unpickler (mmspec.loading.read_checkpoint: tensors, plain data and the
`argparse.Namespace` of the `args` LlamaGen's training scripts save beside the weights); convert them once with
`convert_llamagen`.
"""
from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import torch
from safetensors.torch import save_file

from mmspec.loading import check_folder, check_header, decode_layout, load_strict, read_checkpoint, read_safetensors
from mmspec.reference.gpt import GPT, GPTConfig

# LlamaGen's GPT_models table: (n_layer, n_head, dim)
LLAMAGEN_MODELS = {
    "GPT-B": (12, 12, 768), "GPT-L": (24, 16, 1024), "GPT-XL": (36, 20, 1280), "GPT-XXL": (48, 24, 1536),
    "GPT-XXXL": (48, 40, 2560), "GPT-1B": (22, 32, 2048), "GPT-3B": (24, 32, 3200), "GPT-7B": (32, 32, 4096),
}
_NOT_WEIGHTS = ("freqs_cis", "causal_mask", "kv_cache")


def save_gpt(model: GPT, path: str | Path, dtype: torch.dtype | None = None, **extra) -> None:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "mmspec-gpt", "gpt": model.config.to_dict(), **extra}
    (path / "config.json").write_text(json.dumps(config, indent=2))
    sd = {k: (v.to(dtype) if dtype is not None else v).contiguous() for k, v in model.state_dict().items()}
    save_file(sd, str(path / "model.safetensors"))


def load_config(path: str | Path) -> GPTConfig:
    raw = json.loads((Path(path) / "config.json").read_text())
    if raw.get("model_type") != "mmspec-gpt" or not isinstance(raw.get("gpt"), dict):
        raise ValueError(f"{path} is not an mmspec reference GPT folder (config.json needs model_type "
                         "'mmspec-gpt' and a 'gpt' section)")
    raw = raw["gpt"]
    known = {f.name for f in fields(GPTConfig)}
    if set(raw) - known:
        raise ValueError(f"{path}/config.json has unknown fields {sorted(set(raw) - known)}")
    try:
        return GPTConfig(**raw)
    except TypeError as err:
        raise ValueError(f"{path}/config.json: its 'gpt' section is incomplete ({err})") from None
    except ValueError as err:
        raise ValueError(f"{path}/config.json: {err}") from None


def load_gpt(path: str | Path, dtype: torch.dtype = torch.float32, device="cpu") -> GPT:
    path = check_folder(path, "reference GPT")
    config = load_config(path)
    with torch.device("meta"):
        check_header(GPT(config), path / "model.safetensors", str(path))
    model = GPT(config)
    load_strict(model, read_safetensors(path / "model.safetensors"), str(path))
    return decode_layout(model.to(device=device, dtype=dtype).eval())


def llamagen_config(model: "str | tuple[int, int, int]" = "GPT-B", image_size: int = 256, downsample: int = 16, vocab_size: int = 16384,
                    model_type: str = "c2i", num_classes: int = 1000, class_dropout_prob: float = 0.1,
                    caption_dim: int = 2048, cls_token_num: int = 120) -> GPTConfig:
    """The GPTConfig of a LlamaGen checkpoint, from the same arguments its sampling scripts take
    (`model` is a GPT_models name or an explicit (n_layer, n_head, dim))."""
    if isinstance(model, str) and model not in LLAMAGEN_MODELS:
        raise ValueError(f"unknown LlamaGen model {model!r}; choose one of {sorted(LLAMAGEN_MODELS)}")
    n_layer, n_head, dim = LLAMAGEN_MODELS[model] if isinstance(model, str) else model
    grid = image_size // downsample
    common = dict(vocab_size=vocab_size, dim=dim, n_layer=n_layer, n_head=n_head, rope_axes=2,
                  block_size=grid * grid, cond_rope="zero")
    if model_type == "c2i":
        return GPTConfig(**common, num_classes=num_classes, class_null=class_dropout_prob > 0)
    if model_type == "t2i":
        return GPTConfig(**common, caption_dim=caption_dim, cond_len=cls_token_num)
    raise ValueError(f"model_type must be 'c2i' or 't2i', got {model_type!r}")


def read_llamagen_state_dict(file: str | Path, allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """A LlamaGen checkpoint file -> its GPT state dict ({"model"|"module"|"state_dict": sd} or a raw sd)."""
    sd = read_checkpoint(file, allow_pickle, "convert_llamagen")
    for key in ("model", "module", "state_dict"):
        if isinstance(sd, dict) and key in sd and isinstance(sd[key], dict):
            sd = sd[key]
    return {k: v for k, v in sd.items() if not any(part in k for part in _NOT_WEIGHTS)}


def load_llamagen(file: str | Path, allow_pickle: bool = False, dtype: torch.dtype = torch.float32,
                  **config) -> GPT:
    """A LlamaGen GPT checkpoint into the reference GPT; `config` as for `llamagen_config`."""
    model = GPT(llamagen_config(**config))
    load_strict(model, read_llamagen_state_dict(file, allow_pickle), str(file))
    return decode_layout(model.to(dtype).eval())


def convert_llamagen(file: str | Path, out: str | Path, allow_pickle: bool = False, **config) -> Path:
    """Write a LlamaGen checkpoint as a reference GPT folder (safetensors + config.json)."""
    save_gpt(load_llamagen(file, allow_pickle, **config), out)
    return Path(out)

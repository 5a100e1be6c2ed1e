"""Reading the files a pipeline is given: a model folder's JSON, its config.json with the keys a pipeline needs, a
folder it names; a prompt given as a file of T5 features (Cosmos Video2World, LlamaGen text-to-image)."""
from __future__ import annotations

import json
from pathlib import Path


def read_json(path: Path, what: str):
    """A JSON file of a model folder, with an error naming the file when it is missing or not JSON."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file ({what}); the model folder is incomplete")
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); restore it from the model's source") from None


def named_folder(path: Path, config: dict, key: str) -> Path:
    """A folder a model's config.json names (relative to the model folder), which must exist."""
    folder = path / config[key]
    if not folder.is_dir():
        raise FileNotFoundError(f"{path / 'config.json'} names {key} {config[key]!r}, but there is no folder at "
                                f"{folder.resolve()}: put it there, or fix the config's {key!r}")
    return folder


def read_config(path: Path, keys: tuple[str, ...]) -> dict:
    """A model folder's config.json, with the keys a pipeline needs."""
    config = read_json(path / "config.json", "model config")
    missing = [k for k in keys if k not in config]
    if missing:
        raise ValueError(f"{path / 'config.json'} lacks {', '.join(map(repr, missing))}: not a model folder of this "
                         "format (see models/README.md), or an incomplete config")
    return config


def read_features(file: "str | Path") -> "torch.Tensor | tuple[torch.Tensor, torch.Tensor]":
    """A .safetensors file of T5 features: "context" [S, C] or [1, S, C], and optionally "context_mask"."""
    from mmspec.loading import read_safetensors

    file = Path(file)
    if file.suffix != ".safetensors" or not file.is_file():
        raise FileNotFoundError(f"no text features at {file}: give a .safetensors file holding 'context' (T5 "
                                "encoder states [S, C]) and optionally 'context_mask'")
    sd = read_safetensors(file)
    if "context" not in sd:
        raise ValueError(f"{file} holds {sorted(sd)}, not 'context' (T5 encoder states [S, C])")
    return sd["context"] if "context_mask" not in sd else (sd["context"], sd["context_mask"])

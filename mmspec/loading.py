"""Loading checkpoints from local folders: safetensors only by default, no remote code, clear errors.

A leaf module: reference GPT folders and transformers models (through their Auto class) both load here."""
from __future__ import annotations

from pathlib import Path

import torch


def check_folder(path: str | Path, what: str) -> Path:
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{what}: no folder at {path} (mmspec loads local folders only; nothing is downloaded)")
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{what}: {path} has no config.json")
    if not list(path.glob("*.safetensors")):
        pickles = [p.name for p in path.glob("*.bin")] + [p.name for p in path.glob("*.pt*")]
        hint = f" (found pickle files {pickles}; convert them to safetensors)" if pickles else ""
        raise FileNotFoundError(f"{what}: {path} has no *.safetensors weights{hint}")
    for file in sorted(path.glob("*.safetensors")):
        check_safetensors(file)
    return path


def check_safetensors(file: Path) -> None:
    """Open a safetensors file's header, which also checks that the file holds every tensor it lists: a truncated
    or corrupt file is refused here, by name, rather than deep inside a loader."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="pt"):
            pass
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{file} is not a readable safetensors file ({err}): it may be truncated or corrupt; "
                         "copy or download it again") from None


def read_safetensors(file: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    check_safetensors(file)
    return load_file(str(file))


def raise_on_loading_info(info: dict, path: Path) -> None:
    """transformers only warns when weights and config disagree; mmspec refuses."""
    problems = {k: v for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if (v := info.get(k))}
    if problems:
        detail = "; ".join(f"{k}: {sorted(map(str, v))[:5]}" for k, v in problems.items())
        raise ValueError(f"the weights in {path} do not match its config ({detail})")


def load_pretrained(auto_cls, path: str | Path, what: str, dtype: torch.dtype, trust_remote_code: bool,
                    supported: set[str] | None = None):
    from transformers import AutoConfig

    path = check_folder(path, what)
    config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    if supported is not None and config.model_type not in supported:
        raise ValueError(f"{what}: model type {config.model_type!r} is not supported; expected one of {sorted(supported)}")
    try:
        model, info = auto_cls.from_pretrained(path, local_files_only=True, use_safetensors=True, dtype=dtype,
                                               trust_remote_code=trust_remote_code, output_loading_info=True)
    except (RuntimeError, ValueError) as err:
        if "size mismatch" in str(err) or "mismatch" in str(err).lower():
            raise ValueError(f"the weights in {path} do not match its config: {err}") from None
        raise
    raise_on_loading_info(info, path)
    return model

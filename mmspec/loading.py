"""Loading checkpoints from local folders: safetensors only by default, no remote code, clear errors.

A leaf module: reference GPT folders and transformers models (through their Auto class) both load here."""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F


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
                    supported: set[str] | None = None, device="cpu"):
    """A transformers model from a local folder, on `device`, laid out for decoding (`decode_layout`)."""
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    path = check_folder(path, what)
    config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    if supported is not None and config.model_type not in supported:
        raise ValueError(f"{what}: model type {config.model_type!r} is not supported; expected one of {sorted(supported)}")
    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Loading weights" bar on every load; the caller's setting comes back
    try:
        model, info = auto_cls.from_pretrained(path, local_files_only=True, use_safetensors=True, dtype=dtype,
                                               trust_remote_code=trust_remote_code, output_loading_info=True)
    except (RuntimeError, ValueError) as err:
        if "size mismatch" in str(err) or "mismatch" in str(err).lower():
            raise ValueError(f"the weights in {path} do not match its config: {err}") from None
        raise
    finally:
        if shown:
            hf_logging.enable_progress_bar()
    raise_on_loading_info(info, path)
    return decode_layout(model.to(device))


def decode_layout(model: torch.nn.Module) -> torch.nn.Module:
    """Store each Linear weight of a CPU model input-major: the same [out, in] tensor, its memory that of its
    transpose, so that x @ W.T reads W as a plain [in, out] matrix. A decode step multiplies a few rows (rows x
    window) by weights that the other layers have pushed out of the cache since the last step, and on this
    project's CPUs that product is faster from this layout (a [1, 256] x [256, 4096] product from memory: 0.7 ms
    row-major, 0.3 ms input-major; a bundled model's generation: 3-15% less CPU time; benchmarks/README.md,
    "Weights laid out for decoding"). Values, shapes, state_dict keys and saved files are unchanged (savers write
    `.contiguous()` copies). A weight tied to an Embedding keeps its layout: a lookup wants rows contiguous. Only
    fp32 weights: CPU kernels for half precision are slower from this layout (fp16 up to 20x, bf16 mixed). Layers
    that read the same input become one matrix (`FUSED_GROUPS`, `fused_product`)."""
    tied = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    # fused weights are already input-major: views of their group's matrix
    kept = tied | {id(w) for m in model.modules() for group in FUSED_GROUPS for w in _fuse(m, group, tied)}
    for m in model.modules():
        if _decodable(m) and id(m.weight) not in kept:
            m.weight.data = m.weight.data.t().contiguous().t()
    return model


# Linear layers that read the same input, by the names models give them (Llama's attention and MLP, the reference
# GPT's MLP): `decode_layout` stores each group as one input-major matrix, so a decode step makes one product of the
# group instead of several (code-text, a one-token forward: 14% less time; small products cost their calls).
QKV, GATE_UP, W1_W3 = ("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"), ("w1", "w3")
FUSED_GROUPS = (QKV, GATE_UP, W1_W3)


def _decodable(m: torch.nn.Module) -> bool:
    return isinstance(m, torch.nn.Linear) and m.weight.device.type == "cpu" and m.weight.dtype == torch.float32


def _fuse(module: torch.nn.Module, group: tuple[str, ...], tied: set[int]) -> list[torch.nn.Parameter]:
    """The group's weights [out_i, in] -> one tensor W [in, sum out_i] of which each layer's weight is a view (its
    columns, transposed): values, state_dict and saved files stay as they were. -> the weights fused ([] if none)."""
    linears = [getattr(module, name, None) for name in group]
    if not all(_decodable(m) and m.bias is None and id(m.weight) not in tied for m in linears) \
            or len({m.in_features for m in linears}) != 1:
        return []
    W = torch.cat([m.weight.detach().t() for m in linears], 1)  # [in, sum out], one copy of the row-major weights
    start = 0
    for m in linears:
        m.weight.data = W[:, start:start + m.out_features].t()
        start += m.out_features
    if "_fused" not in module.__dict__:
        module.__dict__["_fused"] = {}
        module.register_state_dict_post_hook(_own_copies)
    module.__dict__["_fused"][group] = (W, tuple(m.weight.data_ptr() for m in linears))
    return [m.weight for m in linears]


def _own_copies(module: torch.nn.Module, state_dict: dict, prefix: str, local_metadata) -> None:
    """A fused module's state_dict holds its weights as tensors of their own: savers that look for tensors sharing
    storage (transformers' save_pretrained) see none, and a saved file is what it was before fusing."""
    for group in module.__dict__["_fused"]:
        for name in group:
            key = f"{prefix}{name}.weight"
            if key in state_dict:
                state_dict[key] = state_dict[key].contiguous()


def fused_product(module: torch.nn.Module, group: tuple[str, ...], x: torch.Tensor) -> torch.Tensor:
    """x [.., in] through the group's layers of `module` -> their outputs side by side [.., sum out_i]: one product
    where `decode_layout` fused them and they still share its storage (a later `.to()` or a weight set anew
    breaks that: then one product each; a compiled step, which cannot compare storages, makes one product each as
    well, and so does a step that records gradients: the fused matrix is not a parameter)."""
    fused = None if torch.compiler.is_compiling() or torch.is_grad_enabled() else \
        module.__dict__.get("_fused", {}).get(group)
    if fused is not None and all(getattr(module, name).weight.data_ptr() == at for name, at in zip(group, fused[1])):
        return x @ fused[0]
    return torch.cat([F.linear(x, getattr(module, name).weight) for name in group], -1)


def load_strict(model: torch.nn.Module, state_dict: dict[str, torch.Tensor], source: str,
                optional: frozenset[str] = frozenset()) -> None:
    """Load every weight the model's config implies, with its shape, and no other (`optional` keys may be absent:
    the module keeps its own)."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state_dict) - optional)
    unexpected = sorted(set(state_dict) - set(expected))
    shapes = [f"{k}: {tuple(state_dict[k].shape)} vs config {tuple(v.shape)}" for k, v in expected.items()
              if k in state_dict and state_dict[k].shape != v.shape]
    if missing or unexpected or shapes:
        raise ValueError(f"the weights in {source} do not match the config: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}, shape mismatches {shapes[:5]}")
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in state_dict.items()}, strict=not optional)

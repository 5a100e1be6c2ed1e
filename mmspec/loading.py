"""Loading checkpoints from local folders: safetensors only by default, no remote code, clear errors.

A leaf module: reference GPT folders and transformers models (through their Auto class) both load here."""
from __future__ import annotations

import argparse
import pickle
import re
import statistics
import time
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


# what a training checkpoint may hold besides tensors and plain data: LlamaGen's training scripts save their
# command line (`args`, an argparse.Namespace) beside the weights
PICKLE_GLOBALS = (argparse.Namespace,)


def read_checkpoint(file: "str | Path", allow_pickle: bool, convert: str):
    """A released checkpoint file: safetensors, or a pickle (`.pt`, `.pth`...) read only with `allow_pickle`, and then
    through torch's weights-only unpickler, which builds tensors, plain data and PICKLE_GLOBALS and refuses any other
    class by name, memory-mapped where its format allows (a large checkpoint is not read whole). `convert`: what
    writes it as safetensors once."""
    file = Path(file)
    if not file.is_file():
        raise FileNotFoundError(f"no checkpoint file at {file}")
    if file.suffix == ".safetensors":
        return read_safetensors(file)
    if not allow_pickle:
        raise ValueError(f"{file} is a pickle; pass --allow-pickle (allow_pickle=True) to read it with torch's "
                         f"weights-only unpickler, then save it as safetensors ({convert})")
    try:
        with torch.serialization.safe_globals(list(PICKLE_GLOBALS)):
            try:
                return torch.load(file, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as err:
                if "mmap" not in str(err):
                    raise
                return torch.load(file, map_location="cpu", weights_only=True)  # torch's legacy format: read it whole
    except (RuntimeError, pickle.UnpicklingError, EOFError) as err:
        if found := re.search(r"GLOBAL (\S+)", str(err)):
            raise ValueError(f"{file} holds the class {found.group(1)}, which mmspec does not unpickle (only tensors, "
                             "plain data and argparse.Namespace): load it in its own code and save the weights as "
                             "safetensors") from None
        raise ValueError(f"{file} is not a file of weights that torch's weights-only unpickler reads "
                         f"({type(err).__name__}): it may be truncated, or hold more than tensors") from None


def raise_on_loading_info(info: dict, path: Path, optional: tuple[str, ...] = ()) -> None:
    """transformers only warns when weights and config disagree; mmspec refuses (missing weights under the
    `optional` prefixes excepted: modules that generation does not run)."""
    info = {**info, "missing_keys": [k for k in info.get("missing_keys") or () if not k.startswith(optional)]}
    problems = {k: v for k in ("missing_keys", "unexpected_keys", "mismatched_keys") if (v := info.get(k))}
    if problems:
        detail = "; ".join(f"{k}: {sorted(map(str, v))[:5]}" for k, v in problems.items())
        raise ValueError(f"the weights in {path} do not match its config ({detail})")


def load_pretrained(auto_cls, path: str | Path, what: str, dtype: torch.dtype, trust_remote_code: bool,
                    supported: set[str] | None = None, device="cpu", optional: tuple[str, ...] = (),
                    released=None):
    """A transformers model from a local folder, on `device`, laid out for decoding (`decode_layout`); weights under
    the `optional` prefixes may be missing from the folder. `released(path, config)` -> {key: tensor}: weights a
    family releases in another layout than the class's, read in the class's (called before any weight loads, so its
    one-line refusals come first); they replace the folder's tensors of those keys, whose shapes may differ."""
    from transformers import AutoConfig
    from transformers.utils import logging as hf_logging

    path = check_folder(path, what)
    config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    if supported is not None and config.model_type not in supported:
        raise ValueError(f"{what}: model type {config.model_type!r} is not supported; expected one of {sorted(supported)}")
    replaced = released(path, config) if released is not None else {}
    shown, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()  # no "Loading weights" bar on every load; the caller's settings come back
    if replaced:  # (transformers reports the shapes it was told to ignore: they are replaced below)
        hf_logging.set_verbosity_error()
    try:
        model, info = auto_cls.from_pretrained(path, local_files_only=True, use_safetensors=True, dtype=dtype,
                                               trust_remote_code=trust_remote_code, output_loading_info=True,
                                               ignore_mismatched_sizes=bool(replaced))
    except (RuntimeError, ValueError) as err:
        if "size mismatch" in str(err) or "mismatch" in str(err).lower():
            raise ValueError(f"the weights in {path} do not match its config: {err}") from None
        raise
    finally:
        hf_logging.set_verbosity(verbosity)
        if shown:
            hf_logging.enable_progress_bar()
    info = {**info, "mismatched_keys": [m for m in info.get("mismatched_keys") or () if m[0] not in replaced]}
    raise_on_loading_info(info, path, optional)
    with torch.no_grad():
        for key, value in replaced.items():
            model.get_parameter(key).copy_(value)
    return decode_layout(model.to(device))


def decode_layout(model: torch.nn.Module) -> torch.nn.Module:
    """Lay out each Linear weight of a CPU fp32 model for decoding: the [out, in] tensor stored input-major (its memory
    that of its transpose, so x @ W.T reads W as a plain [in, out] matrix), and, where this machine multiplies a few
    rows faster from the stored layout (`row_major_pays`), a row-major copy beside it for products of FEW_ROWS rows.

    A decode step multiplies a few rows (rows x window) by weights that the other layers have pushed out of the cache
    since the last step. One row (an AR step) is fastest input-major on every CPU measured (a [1, 256] x [256, 4096]
    product from memory: 0.7 ms row-major, 0.3 ms input-major; emoji-image `ar`: 1.29x slower row-major); for 2-8
    rows CPUs differ (on one host row-major took 0.5-0.7x the time of input-major, on an earlier one 2.3x), and from
    16 rows on the input-major layout was as fast or faster. `product` and `fused_product` pick the copy by the rows
    they multiply (benchmarks/README.md, "Weights laid out for decoding" and "Row-major copies for a few rows"). The
    copies take at most ROW_COPY_BYTES.

    Values, shapes, state_dict keys and saved files are unchanged (savers write `.contiguous()` copies). A weight
    tied to an Embedding keeps its layout: a lookup wants rows contiguous. Only fp32 weights: CPU kernels for half
    precision are slower from the input-major layout (fp16 up to 20x, bf16 mixed). Layers that read the same input
    become one matrix (`FUSED_GROUPS`, `fused_product`). A weight set anew, moved (`.to()`) or changed in place
    (`load_state_dict`, `copy_`) is seen and its copy made again; one changed through `.data` is not: call
    `decode_layout` again after such a change."""
    tied = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    pays = bool(ROW_COPY_BYTES) and row_major_pays(decodable_weights(model))  # (before the weights are fused)
    # fused weights are already input-major: views of their group's matrix
    fused = {id(w) for m in model.modules() for group in FUSED_GROUPS for w in _fuse(m, group, tied)}
    budget = [ROW_COPY_BYTES]

    def row_copy(weights: tuple[torch.Tensor, ...]) -> "_RowCopy | None":
        size = 4 * sum(w.numel() for w in weights)
        if size > budget[0] or not pays:
            return None
        budget[0] -= size
        return _RowCopy(weights, torch.get_num_threads())

    for m in model.modules():
        if _decodable(m) and id(m.weight) not in tied | fused:
            m.weight.data = m.weight.data.t().contiguous().t()
            m.__dict__["_rows"] = row_copy((m.weight,))
        groups = m.__dict__.get("_fused", {})
        for group, (W, ptrs, _) in groups.items():
            groups[group] = (W, ptrs, row_copy(tuple(getattr(m, name).weight for name in group)))
    return model


# products of this many rows read the row-major copies (one row and 16 or more: the input-major weights)
FEW_ROWS = (2, 8)
# the most bytes of row-major copies `decode_layout` keeps for one model: 1 GiB, the Linear weights of a CPU model of
# up to 256M parameters in fp32, LlamaGen-B's size (past it, products of several rows read the input-major layout)
ROW_COPY_BYTES = 1 << 30


# (threads, the probe's weight shape, bytes flushed) -> whether row-major copies pay (see row_major_pays)
_row_major_pays: dict[tuple[int, tuple[int, int], int], bool] = {}
FLUSH_BYTES = 128 << 20  # the most of a model's weights read between two timed products (row_major_pays)


def row_major_pays(weights: list[torch.Tensor]) -> bool:
    """Whether, on this machine at torch's present thread count, products of a few rows run clearly faster (10%) from a
    row-major weight than from an input-major one for the model whose Linear `weights` these are, as a decode step
    makes them: a weight of the shape that holds most of their bytes, timed at 2, 4 and 8 rows, each product after a
    pass over the model's own weights (up to FLUSH_BYTES: a small model stays in the caches between steps as its
    products do, a large one does not; a fixed 16 MB pass left a [768, 256] weight in a 32 MB L3). Median of 5; timed
    once per process, thread count, shape and bytes read. CPUs differ here, and so do thread counts: one of this
    project's hosts took 308 us input-major and 207 us row-major at 2 rows and 1 thread (263 and 199 us at 2
    threads); an earlier one 419 and 969 us ([4096, 256]; benchmarks/README.md, "Weights laid out for decoding")."""
    if not weights:
        return False
    bytes_by_shape: dict[tuple[int, int], int] = {}
    for w in weights:
        bytes_by_shape[tuple(w.shape)] = bytes_by_shape.get(tuple(w.shape), 0) + w.numel() * w.element_size()
    flush, read = [], 0
    for w in weights:
        if read >= FLUSH_BYTES:
            break
        flush.append(w)
        read += w.numel() * w.element_size()
    key = (torch.get_num_threads(), max(bytes_by_shape, key=bytes_by_shape.get), read)
    if key not in _row_major_pays:
        _row_major_pays[key] = _time_layouts(key[1], flush)
    return _row_major_pays[key]


def _time_layouts(shape: tuple[int, int], flush: list[torch.Tensor]) -> bool:
    """row_major_pays's timing: a random weight of `shape` row-major and input-major, each product after a pass over
    the `flush` weights."""
    weight = torch.randn(shape)  # [out, in] row-major, and the same input-major
    layouts = (weight, weight.t().contiguous().t())
    seconds = [0.0, 0.0]
    with torch.no_grad():
        for w in layouts:  # (a process's first products pay one-off costs)
            F.linear(torch.randn(2, shape[1]), w)
        for rows in (2, 4, 8):
            x = torch.randn(rows, shape[1])
            times: list[list[float]] = [[], []]
            for _ in range(5):
                for t, w in zip(times, layouts):
                    for f in flush:
                        f.sum()
                    start = time.perf_counter()
                    F.linear(x, w)
                    t.append(time.perf_counter() - start)
            seconds = [s + statistics.median(t) for s, t in zip(seconds, times)]
    return seconds[0] < 0.9 * seconds[1]


class _RowCopy:
    """A row-major copy of weights [out_i, in] laid out input-major, side by side [sum out_i, in], made again when one
    of them has been set anew, moved or changed in place since (its object, storage or version counter differs);
    read at the thread count where `row_major_pays` said it pays."""

    def __init__(self, weights: tuple[torch.Tensor, ...], threads: int):
        self.sources, self.stamps, self.threads = weights, [(w.data_ptr(), w._version) for w in weights], threads
        self.weight = torch.cat([w.detach() for w in weights]).contiguous()  # [sum out_i, in]

    def of(self, weights: tuple[torch.Tensor, ...]) -> torch.Tensor | None:
        """The copy of `weights` as they are now (None where they are no CPU fp32 matrices any more)."""
        if any(w is not s or (w.data_ptr(), w._version) != stamp
               for w, s, stamp in zip(weights, self.sources, self.stamps)):
            if not all(w.device.type == "cpu" and w.dtype == torch.float32 for w in weights):
                return None
            self.__init__(weights, self.threads)
        return self.weight


def _eager_inference() -> bool:
    """Whether products may read fused matrices and row-major copies: not when recording gradients (they are no
    parameters), nor in a compiled step (it cannot compare storages: it multiplies the weights themselves)."""
    return not torch.is_grad_enabled() and not torch.compiler.is_compiling()


def _few_rows(x: torch.Tensor, rows: _RowCopy) -> bool:
    """Whether x [.., in] holds FEW_ROWS rows, at the thread count where the copy `rows` pays."""
    return FEW_ROWS[0] <= x.numel() // max(x.shape[-1], 1) <= FEW_ROWS[1] and rows.threads == torch.get_num_threads()


def product(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x [.., in] through the bias-free Linear `module` -> [.., out]: FEW_ROWS rows from its row-major copy where
    `decode_layout` made one, other row counts (one row: an AR step) from its input-major weight."""
    rows, weight = module.__dict__.get("_rows"), module.weight
    # eager first: a compiled step must not reach the thread count or the copy's stamps (dynamo cannot trace them)
    copy = rows.of((weight,)) if rows is not None and _eager_inference() and _few_rows(x, rows) else None
    return F.linear(x, weight if copy is None else copy)


# Linear layers that read the same input, by the names models give them (Llama's attention and MLP, the reference
# GPT's MLP, Cosmos's self-attention): `decode_layout` stores each group as one input-major matrix, so a decode step
# makes one product of the group instead of several (code-text, a one-token forward: 14% less time; small products
# cost their calls).
QKV, GATE_UP, W1_W3 = ("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"), ("w1", "w3")
WQ_WK_WV = ("wq", "wk", "wv")
FUSED_GROUPS = (QKV, GATE_UP, W1_W3, WQ_WK_WV)


def decodable_weights(model: torch.nn.Module) -> list[torch.Tensor]:
    """The Linear weights `decode_layout` lays out (a CPU fp32 model's), what `row_major_pays` is asked about."""
    return [m.weight for m in model.modules() if _decodable(m)]


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
    module.__dict__["_fused"][group] = (W, tuple(m.weight.data_ptr() for m in linears), None)  # (row copy: later)
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
    where `decode_layout` fused them and they still share its storage, FEW_ROWS rows from its row-major copy (a later
    `.to()` or a weight set anew breaks that: then one product each; a compiled step, which cannot compare storages,
    makes one product each as well, and so does a step that records gradients: the fused matrix is not a parameter)."""
    fused = module.__dict__.get("_fused", {}).get(group) if _eager_inference() else None
    weights = tuple(getattr(module, name).weight for name in group)
    if fused is not None and all(w.data_ptr() == at for w, at in zip(weights, fused[1])):
        W, _, rows = fused  # [in, sum out], and the row-major copy of the weights
        copy = rows.of(weights) if rows is not None and _few_rows(x, rows) else None
        return x @ W if copy is None else F.linear(x, copy)
    return torch.cat([F.linear(x, w) for w in weights], -1)


def load_strict(model: torch.nn.Module, state_dict: dict[str, torch.Tensor], source: str,
                optional: frozenset[str] = frozenset()) -> None:
    """Load every weight the model's config implies, with its shape, and no other (`optional` keys may be absent:
    the module keeps its own)."""
    expected = model.state_dict()
    check_weights(expected, state_dict, source, optional)
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in state_dict.items()}, strict=not optional)


def check_weights(expected: dict[str, torch.Tensor], state_dict: dict[str, torch.Tensor], source: str,
                  optional: frozenset[str] = frozenset()) -> None:
    """Refuse weights that are not those `expected` (a model's state_dict, on any device, meta included): a key
    missing (but `optional` ones), one too many, or a shape that differs."""
    missing = sorted(set(expected) - set(state_dict) - optional)
    unexpected = sorted(set(state_dict) - set(expected))
    shapes = [f"{k}: {tuple(state_dict[k].shape)} vs config {tuple(v.shape)}" for k, v in expected.items()
              if k in state_dict and state_dict[k].shape != v.shape]
    if missing or unexpected or shapes:
        raise ValueError(f"the weights in {source} do not match the config: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}, shape mismatches {shapes[:5]}")


def check_header(skeleton: torch.nn.Module, file: Path, source: str) -> None:
    """The weights a safetensors file's header lists against those of `skeleton` (the model built on the meta device,
    which costs no memory): a config whose dims the weights do not have is refused before any tensor is allocated."""
    from safetensors import safe_open

    if not file.is_file():
        raise FileNotFoundError(f"{source}: no weights file {file.name}")
    with safe_open(str(file), framework="pt") as f:
        listed = {k: torch.empty(f.get_slice(k).get_shape(), device="meta") for k in f.keys()}
    check_weights(skeleton.state_dict(), listed, source)

"""The families' models at their released sizes with random weights: what a step costs, never what it accepts.

Every released shape is written here once (`REAL`), in the family's own config fields, and `build` makes the model of
that shape with random weights on a device and dtype, without a checkpoint, as the target mmspec runs it. Random
weights give a model's costs (the products, the cache, the attention of its sizes) and nothing of its acceptance:
drafts of a random model are accepted at rates that say nothing about the trained one (its p is near uniform over
the sampling's top-k, or peaked by chance). Figures of acceptance come from trained weights (the papers', the bundled
models').

`scaled(name)` is the same family with every hidden size shrunk to a few dozen (tests run the real builders on those).

Which class runs each family: LlamaGen's GPTs and Cosmos-1 are mmspec's own reference models (their checkpoints load
into them key for key, mmspec.reference); Lumina-mGPT is transformers' Chameleon; Janus-Pro's generation path, Emu3
and Llama-3 are transformers' Llama decoders of their language models' sizes, run through the text adapter (the
image families' positions are 1D, as in those models). Janus-Pro's decoder is given the 16384-code generation head
as its output layer (its 4096 x 4096 gen_head MLP before it, 0.2% of the weights, is left out).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from mmspec.layouts import Grid2D, Grid3D, Layout, Sequence1D
from mmspec.loading import decode_layout
from mmspec.reference.checkpoint import LLAMAGEN_MODELS
from mmspec.reference.cosmos_checkpoint import cosmos_config


@dataclass(frozen=True)
class Real:
    """One released model's shape. `config`: the family's config fields (GPTConfig, CosmosConfig, or a transformers
    config with its model_type); `grid`: the token grid it generates ((h, w) image, (t, h, w) video, (n,) text);
    `prompt`: condition tokens before it (a class label 1, a chat prompt, T5 features); `cfg`: whether its default
    sampling doubles the rows (classifier-free guidance); `source`: where the sizes come from."""

    family: str  # "llamagen", "cosmos", "hf"
    config: dict
    grid: tuple[int, ...]
    prompt: int
    cfg: bool
    source: str
    sampling: dict = field(default_factory=dict)


def _llamagen(name: str) -> dict:
    layers, heads, dim = LLAMAGEN_MODELS[name]
    return dict(vocab_size=16384, dim=dim, n_layer=layers, n_head=heads, rope_axes=2, block_size=256,
                num_classes=1000, cond_rope="zero")


def _llama(vocab: int, layers: int, heads: int, kv_heads: int, ffn: int, theta: float, model_type="llama") -> dict:
    return dict(model_type=model_type, vocab_size=vocab, hidden_size=4096, intermediate_size=ffn,
                num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads, rope_theta=theta,
                max_position_embeddings=16384)


_LLAMAGEN_SAMPLING = {"cfg_scale": 4.0, "top_k": 2000, "temperature": 1.0}  # LlamaGen's sample_c2i.py defaults
REAL: dict[str, Real] = {
    **{f"llamagen-{name.lower()}": Real("llamagen", _llamagen(name), (16, 16), 1, True,
                                        f"FoundationVision/LlamaGen gpt.py GPT_models[{name!r}], c2i 256 px",
                                        _LLAMAGEN_SAMPLING)
       for name in ("GPT-B", "GPT-L", "GPT-XL", "GPT-XXL")},
    # Chameleon 7B's decoder (qk-norm), 768 px: 48 rows of 48 codes and a row end
    "lumina-mgpt-7b": Real("hf", _llama(65536, 32, 32, 32, 11008, 10000.0, "chameleon"), (48, 49), 64, True,
                           "Alpha-VLLM/Lumina-mGPT-7B-768 config.json (ChameleonForConditionalGeneration)",
                           {"cfg_scale": 3.0, "top_k": 2000, "temperature": 1.0, "cfg_mode": "log_softmax"}),
    "janus-pro-7b": Real("hf", _llama(16384, 30, 32, 32, 11008, 10000.0), (24, 24), 64, True,
                         "deepseek-ai/Janus-Pro-7B config.json (language_config; gen_head's 16384 codes)",
                         {"cfg_scale": 5.0, "temperature": 1.0}),
    # 720 px: 90 rows of 90 codes and a row end
    "emu3-gen": Real("hf", _llama(184622, 32, 32, 8, 14336, 1000000.0), (90, 91), 64, True,
                     "BAAI/Emu3-Gen config.json", {"cfg_scale": 3.0, "top_k": 2048, "temperature": 1.0,
                                                   "cfg_mode": "log_softmax"}),
    "cosmos-1-4b": Real("cosmos", cosmos_config("4b").to_dict(), (5, 40, 64), 1, False,
                        "nvidia/Cosmos-1.0-Autoregressive-4B (cosmos1 get_model_arch_specs)",
                        {"temperature": 1.0, "top_p": 0.8}),
    # T5-11B features, padded to 512 tokens as Cosmos's pipeline pads them
    "cosmos-1-5b-video2world": Real("cosmos", cosmos_config("5b").to_dict(), (5, 40, 64), 512, False,
                                    "nvidia/Cosmos-1.0-Autoregressive-5B-Video2World (4B + cross-attention)",
                                    {"temperature": 1.0, "top_p": 0.8}),
    "llama-3-8b": Real("hf", _llama(128256, 32, 32, 8, 14336, 500000.0), (256,), 128, False,
                       "meta-llama/Meta-Llama-3-8B config.json", {"temperature": 0.6, "top_p": 0.9}),
}

# every hidden size a few dozen, two layers: the same builders and the same code paths, in milliseconds on a CPU
_TINY = {"llamagen": dict(vocab_size=64, dim=64, n_layer=2, n_head=4),
         "cosmos": dict(vocab_size=64, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=None,
                        ffn_hidden_size=96, context_dim=16),
         "hf": dict(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4)}


def scaled(name: str) -> Real:
    """`REAL[name]` with every hidden size a few dozen and two layers (grouped-query attention kept grouped), a grid
    of a few tokens a side and a prompt of a few: for tests of the builders on a CPU."""
    real = REAL[name]
    config = {**real.config, **_TINY[real.family]}
    if real.family == "hf" and real.config["num_key_value_heads"] < real.config["num_attention_heads"]:
        config["num_key_value_heads"] = 2
    if real.family == "cosmos" and config.get("bov_token") is not None:  # <bov> after the codes, rows to 64s
        config.update(bov_token=64, embedding_size=128)
    grid = tuple(min(g, 4) for g in real.grid)
    if real.family == "cosmos":
        config["latent_shape"] = list(grid)
    return dataclasses.replace(real, config=config, grid=grid, prompt=min(real.prompt, 3))


def real(name: str) -> Real:
    if name not in REAL:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(REAL)}")
    return REAL[name]


@dataclass
class Synthetic:
    """A built model: the target mmspec runs (`target`), the raw model, and what one generation of it takes."""

    name: str
    real: Real
    model: torch.nn.Module
    target: Any
    layout: Layout
    condition: Any  # one condition (rows: num_samples)
    params: int  # weights of the decoder a step reads (embedding tables excluded)
    sampling: dict  # the family's sampling as this target runs it (see `rows_per_output`)

    @property
    def rows_per_output(self) -> int:
        """Forward rows one output costs: 2 with CFG. The transformers stand-ins run no null condition (the text
        adapter has none), so their sampling here drops CFG: a benchmark runs them at twice the rows instead."""
        return 2 if self.real.cfg else 1


def build(spec: "str | Real", dtype: torch.dtype = torch.bfloat16, device: "str | torch.device" = "cpu",
          seed: int = 0) -> Synthetic:
    """The model of `spec` (a name of REAL, or a Real such as `scaled(name)`) with random weights, in `dtype` on
    `device`: built there (its buffers, RoPE tables, as its own code makes them), then cast and filled in place (a 7B
    model never reaches the host; on a GPU its fp32 build takes 28 GiB for a moment)."""
    name, spec = (spec, real(spec)) if isinstance(spec, str) else ("custom", spec)
    device = torch.device(device)
    with torch.device(device):
        model = _module(spec)
    model = model.to(dtype).eval()
    _fill(model, seed)
    decode_layout(model)  # as a loaded model is laid out (a CPU fp32 model's products; others unchanged)
    target, layout, condition = _target(spec, model, device)
    embedding = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    params = sum(p.numel() for name, p in model.named_parameters() if id(p) not in embedding and "vqmodel" not in name)
    sampling = spec.sampling if spec.family != "hf" else {k: v for k, v in spec.sampling.items()
                                                             if k not in ("cfg_scale", "cfg_mode")}
    return Synthetic(name, spec, model, target, layout, condition, params, sampling)


def _module(spec: Real) -> torch.nn.Module:
    if spec.family == "llamagen":
        from mmspec.reference.gpt import GPT, GPTConfig
        return GPT(GPTConfig(**spec.config))
    if spec.family == "cosmos":
        from mmspec.reference.cosmos import Cosmos, CosmosConfig
        return Cosmos(CosmosConfig(**spec.config))
    from transformers import AutoConfig, AutoModelForCausalLM, ChameleonForConditionalGeneration
    fields = {k: v for k, v in spec.config.items() if k != "model_type"}
    if spec.config["model_type"] == "chameleon":  # its VQ encodes input images, no part of a step: a small one
        vq = dict(embed_dim=4, num_embeddings=8, latent_channels=4, base_channels=32, channel_multiplier=[1, 1],
                  num_res_blocks=1, resolution=16)
        return ChameleonForConditionalGeneration(AutoConfig.for_model("chameleon", **fields, vq_config=vq,
                                                                      vocabulary_map={"<image>": 0}))
    config = AutoConfig.for_model(spec.config["model_type"], **fields)
    return AutoModelForCausalLM.from_config(config)


@torch.no_grad()
def _fill(model: torch.nn.Module, seed: int) -> None:
    """Random weights of a trained model's scale: matrices N(0, 0.02) (LlamaGen's and transformers' init), norms 1.
    Drawn on the model's device by its own generator (a 7B fill on a GPU takes a second)."""
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    for p in model.parameters():
        if p.dim() == 1:
            p.fill_(1.0)
        else:
            p.normal_(0.0, 0.02, generator=generator)


def _target(spec: Real, model: torch.nn.Module, device: torch.device):
    """-> (target, layout, one condition) for mmspec.generate and the target's sessions."""
    grid = spec.grid
    if spec.family == "llamagen":
        from mmspec.adapters.reference import ReferenceTarget
        return ReferenceTarget(model), Grid2D(*grid), torch.tensor([0], device=device)
    if spec.family == "cosmos":
        from mmspec.adapters.cosmos import CosmosTarget
        video2world = spec.config.get("insert_cross_attn")
        condition = (torch.zeros(1, spec.prompt, spec.config["context_dim"], device=device,
                                 dtype=next(model.parameters()).dtype) if video2world else None)
        return CosmosTarget(model), Grid3D(*grid), condition
    from mmspec.adapters.text import HFCausalLM
    length = 1
    for g in grid:
        length *= g
    prompt = [[(7 * i + 1) % spec.config["vocab_size"] for i in range(spec.prompt)]]
    return HFCausalLM(model), Sequence1D(length), prompt

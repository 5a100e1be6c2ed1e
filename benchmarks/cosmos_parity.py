"""mmspec's Cosmos transformer against NVIDIA's own code, on random tiny weights, on a CPU.

    python benchmarks/cosmos_parity.py COSMOS_SRC [--dtype float32|bfloat16] [--out parity.json]

COSMOS_SRC: a checkout that holds NVIDIA's `cosmos1/` package (NVIDIA's Cosmos repository, or junhyukso/SCD's
`cosmos/` folder); nothing of it is copied here. Its `Transformer` (networks/transformer.py) is built for tiny
configs (base and Video2World, with and without YaRN; 3 latent frames of 3 x 4 tokens), given mmspec's random
weights key for key, and both are run on the same sequences: the largest logit difference over every position, and
whether greedy continuation of a given first latent frame (NVIDIA's by full re-forwards, mmspec's with `exact`,
window 8) is the same token for token. NVIDIA's code asks for CUDA where it makes tensors; on a CPU those requests
are turned into CPU ones, and the logging and config helpers it imports but these forwards do not use are stood in
for. Its context mask is passed as [B, 1, 1, S], as its `generate` makes it.
"""
from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _reference_on_cpu(src: Path):
    """NVIDIA's Transformer class, importable and runnable without CUDA."""
    log = types.SimpleNamespace(debug=lambda *a, **k: None, info=lambda *a, **k: None,
                                warning=lambda *a, **k: None)
    sys.modules.setdefault("omegaconf", types.SimpleNamespace(DictConfig=type("DictConfig", (), {}), OmegaConf=None))
    sys.modules["cosmos1.utils.log"] = log
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.cuda.current_device = lambda: "cpu"
    to = torch.Tensor.to

    def cpu_to(self, *args, **kw):
        if kw.get("device") == "cuda":
            kw["device"] = "cpu"
        return to(self, *("cpu" if a == "cuda" else a for a in args), **kw)

    torch.Tensor.to = cpu_to
    sys.path.insert(0, str(src))
    import cosmos1.utils

    cosmos1.utils.log = log
    from cosmos1.models.autoregressive.networks.transformer import Transformer

    return Transformer


def _params(c, dtype: torch.dtype) -> dict:
    """NVIDIA's ModelConfig fields for mmspec's CosmosConfig `c`."""
    return dict(vocab_size=c.vocab_size, n_layers=c.n_layers, precision=str(dtype).split(".")[1],
                num_video_frames=9, dim=c.dim, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads, max_batch_size=2,
                max_seq_len=64, use_qk_normalization=c.use_qk_normalization, causal_mask=True, head_dim=c.head_dim,
                insert_cross_attn=c.insert_cross_attn, insert_cross_attn_every_k_layers=1, context_dim=c.context_dim,
                norm_type="rmsnorm", norm_eps=c.norm_eps, ffn_hidden_size=c.ffn_hidden_size,
                pytorch_rope_version="v2", rope_dim="3D", video_latent_shape=list(c.latent_shape),
                original_seq_len=None, rope_theta=c.rope_theta, apply_yarn=c.apply_yarn, yarn_scale=c.yarn_scale,
                yarn_beta_fast=c.yarn_beta_fast, yarn_beta_slow=c.yarn_beta_slow,
                original_latent_shape=c.original_latent_shape, pad_to_multiple_of=64,
                apply_abs_pos_emb=c.apply_abs_pos_emb)


def compare(Transformer, video2world: bool, yarn: bool, dtype: torch.dtype) -> dict:
    import mmspec
    from mmspec.adapters.cosmos import CosmosTarget
    from tiny import tiny_cosmos

    kw = dict(embedding_size=64) if video2world else {}  # NVIDIA's expand_vocab rounds <bov>'s row up to 64
    if yarn:
        kw.update(apply_yarn=True, original_latent_shape=[2, 2, 2], yarn_scale=2.0, yarn_beta_fast=4.0,
                  yarn_beta_slow=1.0)
    mine = tiny_cosmos(video2world, dtype=torch.float32, latent_shape=(3, 3, 4), dim=48, **kw).to(dtype)
    c = mine.config
    ref = Transformer(_params(c, dtype), tokenizer_config=types.SimpleNamespace(
        training_type="text_to_video" if video2world else "video_to_video"))
    if video2world:
        ref.expand_vocab(c.vocab_size + 1, expand_output_layer=False)
    ref.load_state_dict(mine.state_dict(), strict=True)
    ref.eval()
    shift, N = int(video2world), mine.layout.length
    g = torch.Generator().manual_seed(1)
    seq = torch.randint(0, c.vocab_size, (2, N + shift), generator=g)
    context = torch.randn(2, 7, c.context_dim, generator=g).to(dtype) if video2world else None
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[1, :3] = False  # the second row does not see three context tokens
    if video2world:
        seq[:, 0] = c.bov_token

    def ref_forward(tokens, rows):
        return ref(tokens, input_pos=torch.arange(tokens.shape[1]), context=None if context is None else context[rows],
                   context_mask=None if context is None else mask[rows, None, None])

    with torch.no_grad():
        diff = (ref_forward(seq, slice(0, 2)).float()
                - mine.forward_reference(seq, context, None if context is None else mask).float()).abs().max()
        frame = mine.layout.h * mine.layout.w
        cont = seq[1:, : shift + frame]  # (<bov> and) the first latent frame of the second row
        while cont.shape[1] < N + shift:
            cont = torch.cat([cont, ref_forward(cont, slice(1, 2))[:, -1:].argmax(-1)], 1)
    given = torch.full((1, N), -1)
    given[0, :frame] = seq[1, shift:shift + frame]
    out = mmspec.generate(CosmosTarget(mine), None if context is None else (context[1:], mask[1:]), mine.layout,
                          method="exact", window=8, sampling={"temperature": 0}, given=given)
    return {"model": ("video2world" if video2world else "base") + (" yarn" if yarn else ""), "dtype": str(dtype),
            "max_abs_logit_diff": diff.item(), "greedy_identical": torch.equal(out.tokens[0], cont[0, shift:])}


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cosmos_src", type=Path, help="a folder holding NVIDIA's cosmos1/ package")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args(argv)
    if not (args.cosmos_src / "cosmos1" / "models" / "autoregressive").is_dir():
        parser.error(f"{args.cosmos_src} holds no cosmos1/models/autoregressive/")
    sys.path.insert(0, str(ROOT / "tests"))  # the tiny random models of the test suite
    Transformer = _reference_on_cpu(args.cosmos_src)
    dtype = getattr(torch, args.dtype)
    results = [compare(Transformer, v2w, yarn, dtype) for v2w in (False, True) for yarn in (False, True)]
    for r in results:
        print(f"{r['model']:<18} {r['dtype']:<15} max |dlogit| {r['max_abs_logit_diff']:.2e}  "
              f"greedy identical: {r['greedy_identical']}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()

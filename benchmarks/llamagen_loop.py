"""mmspec against LlamaGen's own loop on the same weights: `autoregressive.models.generate.generate` of a LlamaGen
checkout (FoundationVision/LlamaGen, MIT; not part of mmspec, imported from the folder given at run time) and
`mmspec.generate` with `ar` and the default method, one image class at a time, seconds per image.

Both run one random GPT of a LlamaGen size (mmspec.synthetic; LlamaGen's Transformer gets mmspec's weights key for
key), c2i 256 px (256 tokens), LlamaGen's sampling defaults (CFG 4, top-k 2000, temperature 1). Runs alternate
(LlamaGen, ar, default) `--repeats` times after one warm-up each; the medians are kept, wall-clock and CPU time (the
process's, all threads: on a shared machine what the run costs when it has its cores).

  python benchmarks/llamagen_loop.py --llamagen DIR [--model llamagen-gpt-b] [--rows 1,8] [--repeats 3]
      [--threads 2] [--out DIR]          # or MMSPEC_LLAMAGEN=DIR
  python benchmarks/llamagen_loop.py --mmspec-only ...   # no checkout: mmspec `ar` against the default method
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import mmspec
from mmspec.bench import environment, sync
from mmspec.methods import DEFAULT_METHOD, DEFAULT_WINDOW
from mmspec.synthetic import REAL, build, scaled

ENV = "MMSPEC_LLAMAGEN"


def llamagen_modules(folder: Path):
    """(Transformer, ModelArgs, generate) from a LlamaGen checkout; refused (SystemExit, one line) without one."""
    if not (folder / "autoregressive" / "models" / "generate.py").is_file():
        raise SystemExit(f"{folder}: no LlamaGen checkout there (autoregressive/models/generate.py); pass --llamagen DIR "
                         f"or set {ENV}")
    sys.path.insert(0, str(folder))
    from autoregressive.models.generate import generate
    from autoregressive.models.gpt import ModelArgs, Transformer
    return Transformer, ModelArgs, generate


def their_model(Transformer, ModelArgs, model) -> torch.nn.Module:
    """LlamaGen's Transformer of the same size, with mmspec's model's weights (key for key) in its own layout."""
    cfg = model.model.config
    theirs = Transformer(ModelArgs(dim=cfg.dim, n_layer=cfg.n_layer, n_head=cfg.n_head, vocab_size=cfg.vocab_size,
                                   block_size=cfg.block_size, num_classes=cfg.num_classes, cls_token_num=1,
                                   model_type="c2i", resid_dropout_p=0.0, ffn_dropout_p=0.0, token_dropout_p=0.0))
    theirs.load_state_dict({k: v.contiguous() for k, v in model.model.state_dict().items()})
    return theirs.to(next(model.model.parameters()).dtype).eval()


def measure(folder: "Path | None", name: str, rows: list[int], repeats: int, spec=None, device="cpu",
            dtype: torch.dtype = torch.float32) -> list[dict]:
    """spec: a Real in place of REAL[name] (mmspec.synthetic.scaled: a rehearsal); folder None: mmspec's arms only."""
    model = build(spec or name, dtype=dtype, device=device)
    if folder is not None:
        Transformer, ModelArgs, their_generate = llamagen_modules(folder)
        theirs = their_model(Transformer, ModelArgs, model).to(device)
    s = model.sampling
    out = []
    for B in rows:
        cond = (torch.arange(B) * 7 % model.model.config.num_classes).to(device)  # [B] class ids
        runs = {} if folder is None else {
            "llamagen": lambda: their_generate(theirs, cond, model.layout.length, cfg_scale=s["cfg_scale"],
                                               cfg_interval=-1, temperature=s["temperature"], top_k=s["top_k"],
                                               top_p=1.0, sample_logits=True)}
        runs |= {
            "ar": lambda: mmspec.generate(model.target, cond, model.layout, method="ar", sampling=s, seed=0),
            DEFAULT_METHOD: lambda: mmspec.generate(model.target, cond, model.layout, method=DEFAULT_METHOD,
                                                    window=DEFAULT_WINDOW, sampling=s, seed=0),
        }
        for run in runs.values():
            run()
        times = {k: [] for k in runs}
        results = {}
        for _ in range(repeats):  # alternating: the machine's load falls on every arm alike
            for k, run in runs.items():
                sync()
                wall, cpu = time.perf_counter(), time.process_time()
                results[k] = run()
                sync()
                times[k].append((time.perf_counter() - wall, time.process_time() - cpu))
        row = {"model": name, "rows": B, "threads": torch.get_num_threads(), "repeats": repeats,
               "same_tokens": bool((results["ar"].tokens == results[DEFAULT_METHOD].tokens).all()),
               "nfe_default": float(results[DEFAULT_METHOD].stats.nfe.float().mean())}
        for k, ts in times.items():
            row[f"{k}_s_per_image"] = round(statistics.median(t[0] for t in ts) / B, 3)
            row[f"{k}_cpu_s_per_image"] = round(statistics.median(t[1] for t in ts) / B, 3)
        row["default_vs_ar_cpu"] = round(row["ar_cpu_s_per_image"] / row[f"{DEFAULT_METHOD}_cpu_s_per_image"], 3)
        for k in ("ar", DEFAULT_METHOD) if folder is not None else ():
            row[f"{k}_speedup"] = round(row["llamagen_s_per_image"] / row[f"{k}_s_per_image"], 2)
            row[f"{k}_cpu_speedup"] = round(row["llamagen_cpu_s_per_image"] / row[f"{k}_cpu_s_per_image"], 2)
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def table(rows: list[dict]) -> str:
    d = DEFAULT_METHOD
    if "llamagen_s_per_image" not in rows[0]:
        lines = [f"| model | rows | ar s/image | {d} s/image | ar CPU s | {d} CPU s | {d} / ar (CPU time) | {d} "
                 f"forwards | {d} == ar |", "|" + "---|" * 9]
        return "\n".join(lines + [f"| {r['model']} | {r['rows']} | {r['ar_s_per_image']} | {r[d + '_s_per_image']} | "
                                  f"{r['ar_cpu_s_per_image']} | {r[d + '_cpu_s_per_image']} | {r['default_vs_ar_cpu']}x "
                                  f"| {r['nfe_default']} | {r['same_tokens']} |" for r in rows])
    lines = [f"| model | rows | LlamaGen s/image | ar s/image | {d} s/image | ar x | {d} x | ar x (CPU time) | "
             f"{d} x (CPU time) | {d} == ar |", "|" + "---|" * 10]
    for r in rows:
        lines.append(f"| {r['model']} | {r['rows']} | {r['llamagen_s_per_image']} | {r['ar_s_per_image']} | "
                     f"{r[d + '_s_per_image']} | {r['ar_speedup']} | {r[d + '_speedup']} | {r['ar_cpu_speedup']} | "
                     f"{r[d + '_cpu_speedup']} | {r['same_tokens']} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llamagen", type=Path, default=os.environ.get(ENV),
                    help=f"a LlamaGen checkout (default: ${ENV})")
    ap.add_argument("--model", default="llamagen-gpt-b", choices=[n for n in REAL if n.startswith("llamagen")])
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                    help="both loops' weights (LlamaGen's sample_c2i.py runs bf16 by default)")
    ap.add_argument("--scaled", action="store_true", help="the model's tiny version (a rehearsal)")
    ap.add_argument("--mmspec-only", action="store_true", help="no LlamaGen checkout: mmspec `ar` against the default")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.mmspec_only:
        a.llamagen = None
    elif a.llamagen is None:
        raise SystemExit(f"LlamaGen's own loop is the baseline: pass --llamagen DIR (a FoundationVision/LlamaGen "
                         f"checkout) or set {ENV}")
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    rows = measure(a.llamagen, a.model, [int(x) for x in a.rows.split(",")], a.repeats,
                   scaled(a.model) if a.scaled else None, a.device, dtype)
    print(table(rows))
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        env = {**environment(a.device), "dtype": a.dtype, "scaled": a.scaled, "load": os.getloadavg()}
        (a.out / "llamagen_loop.json").write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
        (a.out / "llamagen_loop.md").write_text(table(rows) + "\n")


if __name__ == "__main__":
    main()

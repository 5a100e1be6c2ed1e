"""compile=True against eager on this machine: seconds per decode step of a bundled model, same run.

For each method/window and batch size, one generation compiles (its time is reported apart: it is paid once
per L and process), then eager and compiled generations alternate and the best of the repeats is
kept. Prints a markdown table and, with --out, writes it with the JSON figures.

  python benchmarks/compile_step.py models/emoji-image --rows 1,8 --methods ar:1,exact:16 [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import mmspec
from mmspec.pipelines.prompts import encode_prompt


def _pipeline(model_dir: Path, device: str):
    config = json.loads((model_dir / "config.json").read_text())
    kind = mmspec.VideoPipeline if config["layout"]["type"] == "Grid3D" else mmspec.ImagePipeline
    return kind.from_pretrained(model_dir, device=device, window_cache="off")


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def measure(model_dir: Path, rows: int, method: str, window: int, repeats: int, backend: str | None,
            device: str = "cpu") -> dict:
    pipe = _pipeline(model_dir, device)
    cond = torch.tensor([encode_prompt("red heart", pipe.vocab, pipe.cond_len)] * rows)
    compile_options = True if backend is None else {"backend": backend}

    def run(compile):
        _sync(device)
        t = time.perf_counter()
        out = mmspec.generate(pipe.target, cond, pipe.layout, method=method, window=window,
                              sampling=pipe.default_sampling, seed=0, compile=compile)
        _sync(device)
        return time.perf_counter() - t, out

    skips = _cudagraph_skips()
    first, compiled_out = run(compile_options)  # compiles every L it meets (the widened first window too)
    eager_out = run(False)[1]
    best = {"eager": float("inf"), "compiled": float("inf")}
    for _ in range(repeats):
        best["eager"] = min(best["eager"], run(False)[0])
        best["compiled"] = min(best["compiled"], run(compile_options)[0])
    steps = int(eager_out.stats.nfe.max())
    return {"rows": rows, "method": method, "window": window, "steps": steps,
            "same_tokens": bool(torch.equal(compiled_out.tokens, eager_out.tokens)),
            "eager_ms_per_step": 1e3 * best["eager"] / steps, "compiled_ms_per_step": 1e3 * best["compiled"] / steps,
            "compiled_over_eager": best["compiled"] / best["eager"], "first_compiled_run_s": first,
            "cudagraph_skips": _cudagraph_skips() - skips}


def _cudagraph_skips() -> int:
    """Graphs inductor ran without CUDA graphs ("skipping cudagraphs due to ..."; 0 on a CPU, which has none)."""
    return torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--methods", default="ar:1,exact:16", help="method:window pairs")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--backend", default=None, help="torch.compile backend (default: inductor)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    results = []
    for rows in map(int, a.rows.split(",")):
        for spec in a.methods.split(","):
            method, window = spec.split(":")
            results.append(measure(a.model_dir, rows, method, int(window), a.repeats, a.backend, a.device))
            print(json.dumps(results[-1]), flush=True)
    lines = [f"{a.model_dir.name}, {a.device}, {a.threads} thread(s), torch {torch.__version__}, backend {a.backend or 'inductor'}",
             "", "| rows | method | window | eager ms/step | compiled ms/step | compiled / eager | first compiled run (s) "
             "| same tokens | CUDA graphs skipped |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['rows']} | {r['method']} | {r['window']} | {r['eager_ms_per_step']:.2f} | "
                     f"{r['compiled_ms_per_step']:.2f} | {r['compiled_over_eager']:.2f}x | {r['first_compiled_run_s']:.0f} | "
                     f"{'yes' if r['same_tokens'] else 'NO'} | {r['cudagraph_skips']} |")
    print("\n".join(lines))
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / f"{a.model_dir.name}.json").write_text(json.dumps(results, indent=1))
        (a.out / f"{a.model_dir.name}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

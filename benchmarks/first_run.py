"""The default (`exact` with `auto`) on a first call against plain AR, in the same run, by batch size.

Every `auto` run starts cold: a fresh window memory (nothing measured before; the model's shipped acceptance
prior only), as the first call of a new process with an empty window cache. `ar` and `auto` alternate after an
untimed `ar` warm-up, and the best CPU time (and wall-clock) of the repeats is kept. On video both methods get
the same first frame, rendered once by the image model, so the ratio is the video model's alone.

  python benchmarks/first_run.py image --rows 1,4,8,16 [--repeats 3] [--threads 1]
"""
from __future__ import annotations

import argparse
import time

import torch

from mmspec.bench import PROMPTS
from mmspec.pipelines import load_pipeline
from mmspec.window import WindowMemories


def compare(pipe, kind: str, rows: int, repeats: int) -> dict:
    prompts = PROMPTS[kind][:1] if rows == 1 else PROMPTS[kind]
    call = dict(num_outputs=max(1, rows // len(prompts)), seed=0)
    if kind == "video":
        call["image"] = pipe.image_model([p for p in prompts for _ in range(call["num_outputs"])], seed=0, method="ar")
    pipe(prompts, method="ar", **call)  # warm-up
    best = {name: [float("inf"), float("inf")] for name in ("ar", "auto")}
    for _ in range(repeats):
        for name in ("ar", "auto"):
            if name == "auto":  # a cold start: the model's prior, nothing measured
                pipe.window_memory = WindowMemories(None, pipe.window_memory.device, pipe.window_memory.prior,
                                                 pipe.window_memory.greedy_prior)
            t0, c0 = time.perf_counter(), time.process_time()
            out = pipe(prompts, method="ar" if name == "ar" else "exact", window="auto", **call)
            best[name] = [min(best[name][0], time.perf_counter() - t0), min(best[name][1], time.process_time() - c0)]
            if name == "auto":
                s = out.stats
                mean_window = 1 + s.forwards_at.sum().item() / max(s.nfe.sum().item(), 1)
                nfe = s.nfe.float().mean().item()
    return {"kind": kind, "rows": len(prompts) * call["num_outputs"], "cpu_speedup": best["ar"][1] / best["auto"][1],
            "wall_speedup": best["ar"][0] / best["auto"][0], "ar_cpu_s": best["ar"][1], "auto_cpu_s": best["auto"][1],
            "auto_nfe_per_row": nfe, "auto_mean_window": mean_window}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["image", "video"])
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    pipe = load_pipeline(a.kind, window_cache="off")
    for rows in map(int, a.rows.split(",")):
        r = compare(pipe, a.kind, rows, a.repeats)
        print(f"{r['kind']} rows={r['rows']}: auto/ar CPU {r['cpu_speedup']:.2f}x wall {r['wall_speedup']:.2f}x "
              f"(ar {r['ar_cpu_s']:.2f} s, auto {r['auto_cpu_s']:.2f} s CPU; auto {r['auto_nfe_per_row']:.0f} "
              f"forwards per row, mean window {r['auto_mean_window']:.1f})", flush=True)


if __name__ == "__main__":
    main()

"""Rows that are done leaving the target's forwards (mmspec.adapters.rows), against the same rows riding along to the
end as they did before, and against plain AR, in the same run.

A batch of the four prompts x `--per-prompt` runs `exact` at each window (fixed, or `auto` from a cold window
memory) twice per round: once as shipped, once with `Rows.follow` disabled (every row runs every forward to
the end). `ar` runs in every round too; the best CPU time of the rounds is kept. On video every run gets the same
first frames, rendered once by the image model.

  python benchmarks/rows_leave.py video --windows 8,16,auto [--rounds 3] [--per-prompt 2]
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from mmspec.adapters.rows import Rows
from mmspec.bench import PROMPTS
from mmspec.pipelines import load_pipeline
from mmspec.window import WindowMemories


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["image", "video"])
    ap.add_argument("--windows", default="8,16,auto")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-prompt", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    pipe = load_pipeline(args.kind, window_cache="off")
    prompts = PROMPTS[args.kind]
    call = {"seed": args.seed, "num_outputs": args.per_prompt}
    if args.kind == "video":
        call["image"] = pipe.image_model([p for p in prompts for _ in range(args.per_prompt)], seed=args.seed,
                                         method="ar")
    windows = [w if w == "auto" else int(w) for w in args.windows.split(",")]
    runs = [("ar", 1, True)] + [(w, w, leave) for w in windows for leave in (True, False)]
    best = {run: float("inf") for run in runs}
    forwards, follow = {}, Rows.follow
    pipe(prompts, method="ar", **call)  # warm-up
    for _ in range(args.rounds):
        for run in runs:
            name, window, leave = run
            Rows.follow = follow if leave else (lambda self, active, running: None)
            pipe.window_memory = WindowMemories(None, pipe.window_memory.device, pipe.window_memory.prior,
                                                 pipe.window_memory.greedy_prior)
            c0 = time.process_time()
            out = pipe(prompts, method="ar" if name == "ar" else "exact", window=window, **call)
            best[run] = min(best[run], time.process_time() - c0)
            forwards[run] = out.stats.total_nfe
    Rows.follow = follow
    rows = len(prompts) * args.per_prompt
    table = {f"{name}{'' if name == 'ar' else (', rows leave' if leave else ', rows stay')}":
             {"seconds": round(best[(name, w, leave)], 3), "vs_ar": round(best[runs[0]] / best[(name, w, leave)], 3),
              "forwards": forwards[(name, w, leave)]} for name, w, leave in runs}
    print(f"{args.kind}, {rows} rows, best CPU time of {args.rounds} rounds")
    for name, row in table.items():
        print(f"  {name:<22} {row['seconds']:7.2f} s  {row['vs_ar']:.3f}x of ar  {row['forwards']} forwards")
    result = {"kind": args.kind, "rows": rows, "rounds": args.rounds, "runs": table}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()

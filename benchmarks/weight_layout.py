"""Linear weights laid out for decoding (mmspec.loading.decode_layout: input-major in memory) against the same
model with its weights row-major as stored, in the same process and the same rounds.

Two copies of a bundled pipeline are loaded; one gets its target's (and first-frame model's, and draft head's)
Linear weights made row-major again. Each method runs on both, alternating, `--rounds` times; the best CPU time of
each is kept (1 thread). On a machine whose cache cannot hold a model, a decode step reads every weight from memory
again; this measures what the layout changes there.

  python benchmarks/weight_layout.py image --rows 1,8 [--rounds 3] [--out benchmarks/results/weight_layout]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mmspec.bench import PROMPTS
from mmspec.pipelines import load_pipeline

METHODS = {"image": [("ar", 1), ("exact", 16), ("exact", "auto")], "video": [("ar", 1), ("exact", 64)],
           "text": [("ar", 1), ("eagle", 8), ("lookup", "auto")]}


def row_major(module: torch.nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, torch.nn.Linear):
            m.weight.data = m.weight.data.contiguous()


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=sorted(METHODS))
    ap.add_argument("--rows", default="1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="a folder for KIND.json and KIND.md")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    laid_out, stored = (load_pipeline(args.kind, window_cache="off") for _ in range(2))
    if args.kind == "text":
        for pipe in (laid_out, stored):
            pipe.resolve("eagle")  # loads the draft head
        row_major(next(iter(stored.heads.values())))
    row_major(stored.target.model)
    if getattr(stored, "image_model", None) is not None:
        row_major(stored.image_model.target.model)
    extra = {"max_new_tokens": 128} if args.kind == "text" else {}
    results = []
    for rows in map(int, args.rows.split(",")):
        prompts = [PROMPTS[args.kind][0]] * rows
        best = {}
        for _ in range(args.rounds):
            for method, window in METHODS[args.kind]:
                for name, pipe in (("stored", stored), ("laid out", laid_out)):
                    c0 = time.process_time()
                    pipe(prompts, method=method, window=window, seed=0, **extra)
                    key = (method, window, name)
                    best[key] = min(best.get(key, float("inf")), time.process_time() - c0)
        for method, window in METHODS[args.kind]:
            a, b = best[(method, window, "stored")], best[(method, window, "laid out")]
            results.append({"rows": rows, "method": method, "window": window, "row_major_s": round(a, 3),
                            "input_major_s": round(b, 3), "speed_up": round(a / b, 3)})
            print(f"{args.kind} {rows} row(s) {method} {window}: row-major {a:.3f} s, input-major {b:.3f} s, "
                  f"{a / b:.3f}x", flush=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{args.kind}.json").write_text(json.dumps({"kind": args.kind, "rounds": args.rounds,
                                                           "results": results}, indent=1))
        lines = [f"# {args.kind}: weights input-major (as loaded) against row-major (as stored)", "",
                 f"Best CPU time of {args.rounds} alternating rounds, 1 thread, prompt {PROMPTS[args.kind][0]!r}.", "",
                 "| rows | method | window | row-major s | input-major s | speed-up |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['rows']} | {r['method']} | {r['window']} | {r['row_major_s']} | {r['input_major_s']} | "
                  f"{r['speed_up']}x |" for r in results]
        (out / f"{args.kind}.md").write_text("\n".join(lines) + "\n")
    return {"kind": args.kind, "results": results}


if __name__ == "__main__":
    main()

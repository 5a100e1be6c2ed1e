"""Linear weights laid out for decoding (mmspec.loading.decode_layout) against the other layouts, in the same process
and the same rounds: as loaded (input-major, with row-major copies for products of a few rows where
`row_major_pays` says so on this machine), input-major only (no copies), and row-major as stored.

Three copies of a bundled pipeline are loaded, one per layout: the target's (and first-frame model's, and draft
head's) Linear weights. Each method runs on each, alternating, `--rounds` times; the best CPU time of each is kept
(1 thread). On a machine whose cache cannot hold a model, a decode step reads every weight from memory again; this
measures what the layout changes there.

  python benchmarks/weight_layout.py image --rows 1,8 [--methods ar:1,exact:4] [--rounds 3]
      [--out benchmarks/results/weight_layout]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

import mmspec.loading
from mmspec.bench import PROMPTS
from mmspec.pipelines import load_pipeline

METHODS = {"image": [("ar", 1), ("exact", 16), ("exact", "auto")], "video": [("ar", 1), ("exact", 64)],
           "text": [("ar", 1), ("eagle", 8), ("lookup", "auto")]}


LAYOUTS = ("as loaded", "input-major", "row-major")


def row_major(module: torch.nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, torch.nn.Linear):
            m.weight.data = m.weight.data.contiguous()
            m.__dict__.pop("_rows", None)
        m.__dict__.pop("_fused", None)


def load(kind: str, layout: str):
    """A pipeline with its weights in `layout` (the draft head loaded too, for text)."""
    budget = mmspec.loading.ROW_COPY_BYTES
    mmspec.loading.ROW_COPY_BYTES = 0 if layout == "input-major" else budget
    try:
        pipe = load_pipeline(kind, window_cache="off")
        if kind == "text":
            pipe.resolve("eagle")  # loads the draft head
    finally:
        mmspec.loading.ROW_COPY_BYTES = budget
    if layout == "row-major":
        for module in [pipe.target.model, *getattr(pipe, "heads", {}).values()]:
            row_major(module)
        if getattr(pipe, "image_model", None) is not None:
            row_major(pipe.image_model.target.model)
    return pipe


def _methods(text: str) -> list[tuple[str, "int | str"]]:
    return [(m, w if w == "auto" else int(w)) for m, w in (item.split(":") for item in text.split(","))]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=sorted(METHODS))
    ap.add_argument("--rows", default="1")
    ap.add_argument("--methods", help="method:window,... (default: the kind's usual ones)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="a folder for KIND.json and KIND.md")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    pipes = {layout: load(args.kind, layout) for layout in LAYOUTS}
    methods = _methods(args.methods) if args.methods else METHODS[args.kind]
    extra = {"max_new_tokens": 128} if args.kind == "text" else {}
    results = []
    for rows in map(int, args.rows.split(",")):
        prompts = [PROMPTS[args.kind][0]] * rows
        best = {}
        for _ in range(args.rounds):
            for method, window in methods:
                for layout, pipe in pipes.items():
                    c0 = time.process_time()
                    pipe(prompts, method=method, window=window, seed=0, **extra)
                    key = (method, window, layout)
                    best[key] = min(best.get(key, float("inf")), time.process_time() - c0)
        for method, window in methods:
            seconds = {layout: round(best[(method, window, layout)], 3) for layout in LAYOUTS}
            results.append({"rows": rows, "method": method, "window": window, "seconds": seconds})
            print(f"{args.kind} {rows} row(s) {method} {window}: " + ", ".join(
                f"{layout} {t:.3f} s ({t / seconds['as loaded']:.3f}x)" for layout, t in seconds.items()), flush=True)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        pays = mmspec.loading.row_major_pays(mmspec.loading.decodable_weights(pipes["as loaded"].target.model))
        (out / f"{args.kind}.json").write_text(json.dumps({"kind": args.kind, "rounds": args.rounds,
                                                           "row_major_pays": pays, "results": results}, indent=1))
        lines = [f"# {args.kind}: Linear weights as loaded, input-major only and row-major as stored", "",
                 f"Best CPU time of {args.rounds} alternating rounds, 1 thread, prompt {PROMPTS[args.kind][0]!r}; "
                 f"row-major copies for 2-8 rows {'kept' if pays else 'not kept'} on this machine "
                 "(`mmspec.loading.row_major_pays`). In parentheses: the time against as loaded.", "",
                 "| rows | method | window | " + " | ".join(f"{layout} s" for layout in LAYOUTS) + " |",
                 "|---|---|---|" + "---|" * len(LAYOUTS)]
        lines += [f"| {r['rows']} | {r['method']} | {r['window']} | " + " | ".join(
            f"{r['seconds'][layout]} ({r['seconds'][layout] / r['seconds']['as loaded']:.2f}x)" for layout in LAYOUTS)
            + " |" for r in results]
        (out / f"{args.kind}.md").write_text("\n".join(lines) + "\n")
    return {"kind": args.kind, "results": results}


if __name__ == "__main__":
    main()

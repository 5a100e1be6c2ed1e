"""Text methods at fixed windows and at `auto`, against transformers' prompt lookup and assisted generation, in the
same run: how wide a window pays on code-text at 1 row (what sets TextPipeline.default_window, auto's widest).

    python -m benchmarks.text_windows --methods eagle,lookup --windows 4,6,8,12,16 --sampling greedy \
        --out benchmarks/results/text-windows

Tokens per second of new tokens, best of `--repeats` interleaved runs after one untimed run of each
(benchmarks/suite/run.py's text case: 3 prompts x 128 new tokens, 1 thread). Sampled runs draw other texts at each
window (rejection sampling keeps the law, not the draws), so their differences carry sampling noise as well.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from benchmarks.suite.cases import GREEDY, SAMPLED, TextCase
from benchmarks.suite.run import run_text
from mmspec.bench import Entry, environment
from mmspec.pipelines import load_pipeline


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="eagle,lookup")
    ap.add_argument("--windows", default="4,6,8,12,16", help="fixed windows, each beside `auto`")
    ap.add_argument("--sampling", choices=["greedy", "sampled"], default="greedy")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="folder for text-windows-SAMPLING.json and .md")
    args = ap.parse_args()
    torch.set_num_threads(1)
    pipe = load_pipeline("text", window_cache="off")
    windows = [None] + [int(w) for w in args.windows.split(",")]
    entries = tuple(Entry(m, w, f"{m} {'auto' if w is None else f'w={w}'}")
                    for m in args.methods.split(",") for w in windows)
    sampling = GREEDY if args.sampling == "greedy" else SAMPLED
    case = TextCase(1, sampling, entries, ("assisted", "prompt-lookup"), prompts=3, repeats=args.repeats)
    results = run_text(pipe, case, seed=0, max_new_tokens=128)["results"]
    tps = {name: r["tokens_per_second"] for name, r in results.items()}
    lookup, assisted = tps["transformers prompt-lookup"], tps["transformers assisted"]
    lines = [f"# Text windows, code-text, 1 row, {args.sampling} (auto's widest: {pipe.default_window})", "",
             "| run | tokens/s | vs prompt lookup | vs assisted |", "|---|---|---|---|"]
    lines += [f"| {name} | {t:.1f} | {t / lookup:.2f}x | {t / assisted:.2f}x |" for name, t in tps.items()]
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"text-windows-{args.sampling}.json").write_text(json.dumps(
            {"environment": environment(), "sampling": sampling, "default_window": pipe.default_window,
             "results": results}, indent=1, default=str) + "\n")
        (out / f"text-windows-{args.sampling}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

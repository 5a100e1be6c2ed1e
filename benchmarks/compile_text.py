"""compile=True on text, where chains vary in length (a lookup's match, a head's chain that stops): the first call's
time (compiling every kind of step it meets) and tokens per second after, against eager, same run.

Each variant runs the prompts once (its compile is paid there, once per process), then the variants alternate for
`--repeats` rounds; the best and median tokens per second (all prompts' tokens over their summed wall-clock) are
printed with tokens per forward. 1 thread. Clear the inductor cache (/tmp/torchinductor_$USER) for a cold compile.

  python benchmarks/compile_text.py [--methods ar:1,eagle:8] [--prompts 3] [--repeats 3] [--greedy]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from mmspec.bench import PROMPTS
from mmspec.pipelines import load_pipeline


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="ar:1,eagle:8")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--greedy", action="store_true", help="temperature 0 (default: T 0.8, top-p 0.95)")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    sampling = {"temperature": 0.0} if a.greedy else {"temperature": 0.8, "top_p": 0.95}
    pipe = load_pipeline("text", window_cache="off")
    prompts = PROMPTS["text"][:a.prompts]
    variants = [(m, w if w == "auto" else int(w), compiled) for m, w in (s.split(":") for s in a.methods.split(","))
                for compiled in (False, True)]

    def run(method, window, compiled):
        seconds = tokens = forwards = 0
        for prompt in prompts:
            t0 = time.perf_counter()
            out = pipe(prompt, method=method, window=window, sampling=sampling, seed=0, max_new_tokens=a.tokens,
                       compile=compiled)
            seconds += time.perf_counter() - t0
            tokens, forwards = tokens + out.stats.committed.sum().item(), forwards + out.stats.nfe.sum().item()
        return tokens / seconds, tokens / forwards, seconds

    first = {v: run(*v)[2] for v in variants}
    rates = {v: [] for v in variants}
    for _ in range(a.repeats):
        for v in variants:
            rates[v].append(run(*v)[:2])
    print("| method | window | compiled | first call s | tokens/s best | median | tokens/forward |\n|---|---|---|---|---|---|---|")
    for (m, w, c), r in rates.items():
        print(f"| {m} | {w} | {'yes' if c else 'no'} | {first[(m, w, c)]:.1f} | {max(x for x, _ in r):.1f} | "
              f"{statistics.median(x for x, _ in r):.1f} | {r[0][1]:.2f} |")


if __name__ == "__main__":
    main()

"""Proactive branches against the plain chain: forward counts on the bundled models (no timing).

    python benchmarks/proactive.py image exact:32 exact:32:16x2 ...
    python benchmarks/proactive.py text draft-model:6 draft-model:6:8x5

A spec is METHOD:WINDOW[:WIDTHxDEPTH][:INIT] (e.g. exact:64::random). Grids: 4 prompts x 2 samples in one batch, NFE ratio = layout
length / forwards per row (what `ar` needs; video counts frame 0's forced forwards too). `exact` gives
`ar`'s tokens with or without branches, so its comparisons are paired; the other methods sample
differently with branches, so their figures carry the sampling noise of 8 rows. Text: code-text with
code-text-draft, 5 prompts x 2 samples, 64 new tokens, temperature 0.8, top-p 0.95.
"""
import sys

import torch

from mmspec.bench import PROMPTS
from mmspec.pipelines import load_pipeline

GRID_PROMPTS = {"image": ["red heart", "yellow star", "green tree", "blue fish"],
                "video": ["bounce red apple", "slide yellow star right", "zoom green tree", "rotate blue fish"]}
TEXT_PROMPTS = PROMPTS["text"] + ["def is_prime(n):\n    if n < 2:\n        return False\n", "for i in range("]


def method(spec: str) -> tuple[dict, int]:
    name, window, *rest = spec.split(":")
    m = {"name": name}
    if rest and rest[0]:
        m["proactive"] = [int(x) for x in rest[0].split("x")]
    if len(rest) > 1:
        m["init"] = rest[1]
    return m, int(window)


def main(kind: str, specs: list[str]) -> None:
    torch.set_num_threads(1)
    pipe = load_pipeline(kind, None, None, "cpu", window_cache="off")
    for spec in specs:
        m, window = method(spec)
        if kind == "text":
            out = pipe(TEXT_PROMPTS, num_outputs=2, seed=0, method=m, window=window,
                       sampling={"temperature": 0.8, "top_p": 0.95}, max_new_tokens=64)
            figure = f"mean acceptance length {out.stats.mean_acceptance_length:.2f}"
        else:
            out = pipe(GRID_PROMPTS[kind], num_outputs=2, seed=0, method=m, window=window)
            nfe = out.stats.nfe.float().mean().item()
            figure = f"forwards/row {nfe:6.1f}  NFE ratio {pipe.layout.length / nfe:5.2f}x"
        slots = [round(a, 2) for a in out.stats.acceptance_per_position[:4]]
        print(f"{kind} {spec:22s} {figure}  acceptance at slots 0-3 {slots}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

"""Measure a bundled model's acceptance prior, models/<model>/window-prior.json: for each method that runs with
window="auto", the tokens per step by which the batch's rearmost row moved (`batch_progress`, as AutoWindow counts
them; at one row, the tokens committed) at each of AutoWindow's candidate windows, at 1 row and at larger batches
(`--rows 4,8` measures those only and keeps the rest of the file), from real generations under the model's default
sampling; overall and by band of the output (`BANDS` equal shares of its indices, by where the step starts: the
top rows of an emoji commit 1.4 tokens per step at 16, the rows below 1.9-2.6). AutoWindow starts from it (mmspec.window.load_prior) and probes each width's step cost on the running
device with a few real steps, so that a first call need not explore from plain AR.

    python models/recipes/window_prior.py image   # or video, text; see --help

Tokens per step do not depend on the device or on timing (only on the model, the method, the sampling and the
window), so the file holds for every machine; the costs are what each machine times for itself.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from mmspec.bench import PROMPTS
from mmspec.pipelines import load_pipeline
from mmspec.window import PRIOR_FILE, AutoWindow, FixedWindow, batch_progress

METHODS = ["exact", "coupled", "gumbel", "jacobi", "lookup", "pac"]
ROWS = {"image": [1, 4, 8, 16], "video": [1, 8], "text": [1, 4]}
BANDS = 8
SHRINK = 16  # a band's figure counts the overall figure as this many steps of its own (few steps are noisy)


class CountingWindow(FixedWindow):
    """A fixed window that adds up what the row furthest behind commits per step, by the band of the output the
    step starts in, over the steps AutoWindow would count at this width: not the first step, nor the warm-up after
    widening from plain AR."""

    def __init__(self, window: int):
        super().__init__(window)
        self.skip = max(1, AutoWindow(max_window=window)._warmup(window, 1))
        self.tokens, self.steps = np.zeros(BANDS), np.zeros(BANDS)

    def observe(self, state, k, seconds) -> None:
        if self.skip > 0:
            self.skip -= 1
            return
        progress = batch_progress(state, k)
        if progress is not None:  # (its start: AutoWindow's position)
            tokens, start = progress
            band = min(start * BANDS // state.length, BANDS - 1)
            self.tokens[band] += tokens
            self.steps[band] += 1


def measure(pipe, kind: str, method: str, rows: int, windows: list[int], seeds: list[int],
            greedy: bool = False) -> dict[int, tuple]:
    """window -> (tokens, steps) by band, over every prompt at 1 row, or batches of `rows` rows cycling through the
    prompts; at the model's default sampling, or at temperature 0 (`greedy`)."""
    prompts = PROMPTS[kind]
    batches = [[p] for p in prompts] if rows == 1 else [[prompts[i % len(prompts)] for i in range(rows)]]
    call = {"max_new_tokens": 64} if kind == "text" else {}
    if greedy:
        call["sampling"] = {**pipe.default_sampling, "temperature": 0.0}
    counts = {}
    for L in windows:
        tokens = steps = 0
        for batch in batches:
            for seed in seeds:
                policy = CountingWindow(L)
                pipe(batch, seed=seed, method=method, window=policy, **call)
                tokens, steps = tokens + policy.tokens, steps + policy.steps
        counts[L] = (tokens, steps)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=sorted(ROWS))
    ap.add_argument("--methods", default=None, help="comma-separated (default: every method that uses auto)")
    ap.add_argument("--rows", default=None, help="comma-separated batch sizes (default: 1,4,8,16 image; 1,8 video; "
                                                 "1,4 text)")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per prompt (row seeds: seed + row)")
    ap.add_argument("--greedy", action="store_true", help="at temperature 0, into the file's greedy_ fields (what "
                                                          "`auto` starts from in a greedy call)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # the counts do not depend on it; other work on the machine does not wait for us
    pipe = load_pipeline(args.kind)
    methods = args.methods.split(",") if args.methods else METHODS + (["draft-model", "eagle"] if args.kind == "text" else [])
    rows_list = [int(r) for r in args.rows.split(",")] if args.rows else ROWS[args.kind]
    candidates = AutoWindow(max_window=pipe.default_window).candidates
    tokens, by_band, steps = {}, {}, {}
    for method in methods:
        for rows in rows_list:
            seeds = list(range(1 if args.greedy else args.seeds))  # (greedy: every seed draws the same text)
            counts = measure(pipe, args.kind, method, rows, candidates[1:], seeds, args.greedy)
            # at window 1 no row has drafts: every running row commits one token per step
            overall = {1: 1.0, **{L: round(float(t.sum() / max(n.sum(), 1)), 3) for L, (t, n) in counts.items()}}
            # a band's own steps, shrunk toward the overall figure: a batch of 8 rows takes 10 steps at 16 in a band,
            # and one of them committing 5 moves its mean by 0.4
            bands = {1: [1.0] * BANDS, **{L: [round(float((tb + SHRINK * overall[L]) / (nb + SHRINK)), 3)
                                               for tb, nb in zip(t, n)] for L, (t, n) in counts.items()}}
            tokens.setdefault(method, {})[rows], by_band.setdefault(method, {})[rows] = overall, bands
            steps.setdefault(method, {})[rows] = {1: 0, **{L: int(n.sum()) for L, (_, n) in counts.items()}}
            print(method, rows, overall, {L: b for L, b in bands.items() if L > 1}, flush=True)
    folder = Path(__file__).resolve().parents[1] / {"image": "emoji-image", "video": "emoji-video",
                                                    "text": "code-text"}[args.kind]
    path = folder / PRIOR_FILE
    first = "greedy_" if args.greedy else ""
    fields = {f"{first}tokens_per_step": tokens, f"{first}tokens_per_step_by_band": by_band,
              f"{first}steps_counted": steps}
    before = json.loads(path.read_text()) if path.is_file() else {}
    # the methods, batch sizes and sampling not measured now keep what the file holds
    fields = {field: _merged(before.get(field, {}), new) for field, new in fields.items()}
    out = {"about": "tokens per step by which the batch's rearmost row moved (mmspec.window.batch_progress), by "
                    "method, batch size and window, "
                    "under the model's default sampling (greedy_ fields: at temperature 0), overall and by band of "
                    "the output (equal shares of its indices, by where the step starts); written by "
                    "models/recipes/window_prior.py",
           "sampling": pipe.default_sampling, "prompts": PROMPTS[args.kind], "seeds": args.seeds,
           **{k: v for k, v in before.items() if k not in ("about", "sampling", "prompts", "seeds")}, **fields}
    path.write_text(json.dumps(out, indent=1) + "\n")
    print("wrote", path)


def _merged(saved: dict, measured: dict) -> dict:
    """method -> batch size -> figures: what was measured now over what the file held."""
    return {method: {**saved.get(method, {}), **{str(rows): v for rows, v in measured.get(method, {}).items()}}
            for method in {**saved, **measured}}


if __name__ == "__main__":
    main()

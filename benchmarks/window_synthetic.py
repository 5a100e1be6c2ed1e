"""`auto` on synthetic generations: step costs from a cost model, tokens per step from emoji-image's shipped prior.

No model runs (seconds of CPU for the whole table): each step commits, in every row, a bursty count whose mean is the
prior's tokens per step for its L, batch size and band of the output, times `--scale` on the extra tokens (the
prior's figures are rearmost-row progress, what the policy counts); it costs what the cost model says for its L
and batch size, growing along the output as in policy_sim.py. What it shows is how the policy's rules meet a shape
of step costs, not a speed-up: policy_sim.py replays real generations.

Cost models, seconds a step at L at R rows:
  gpu-linear  c0 (1 + 0.013 (L - 1)): a step of 16 1.2x AR, the same per position from AR on
  gpu         AR c0, a wider step c0 (1 + J + s (L - 1)): the drafter's and verifier's fixed cost J, then little per
              position (J, s: 0.36, 0.001 at 1 row, the H200 window sweep's flat 5.3-5.6 ms a step from 4 to 32 against
              AR's 3.9; 0.17, 0.002 at 8 rows, a step of 16 1.2x AR; 0.2, 0.0093 at 32 rows, a step
              of 16 1.34x AR as the H200 timed it at cf730a6, benchmarks/results/gpu/suite-image: `ar` 1.350 s for
              256 steps, 5.27 ms; fixed `exact` 16 1.613 s for about 229 forwards of the batch, 7.04 ms (its 143.7
              forwards are a row's mean: the batch runs until its last row is done, 229 on a CPU at the same NFE
              per row); J is not measured there, 4 and 8 were not run. The batch's last row moves 1.12 tokens a step
              at 16 there: `--scale 0.37` on the prior's 1.32)
  cpu         policy_sim.py's emoji-image table (1 and 8 rows, linear in the rows)

  python benchmarks/window_synthetic.py --seeds 16 [--scale 1.3]
"""
from __future__ import annotations

import argparse
import random

import torch

from benchmarks.policy_sim import cost as cpu_cost
from mmspec.pipelines.base import models_dir
from mmspec.sampling import Sampling
from mmspec.window import AutoWindow, WindowMemory, load_prior, prior_at

LENGTH, CANDIDATES, BURST = 256, [1, 4, 8, 16], 0.3  # a step commits a run with chance BURST, else 1 token
COLD = 4  # the steps `--cold` makes dearer: plain AR's probe, the first steps `auto` times
GPU = {1: (0.36, 0.001), 8: (0.17, 0.002), 32: (0.2, 0.0093)}  # rows -> (J, s)
MODELS = {"gpu-linear": lambda L, R, pos: 0.0065 * (1 + 0.013 * (L - 1)) * (1 + 0.3 * pos),
          "gpu": lambda L, R, pos: 0.0065 * (1 + (GPU[R][0] + GPU[R][1] * (L - 1) if L > 1 else 0)) * (1 + 0.3 * pos),
          "cpu": lambda L, R, pos: cpu_cost("image", L, pos, R)}


class State:
    """What AutoWindow reads of a decode state."""

    def __init__(self, rows: int):
        self.batch_size, self.running, self.length = rows, rows, LENGTH
        self.n = torch.zeros(rows, dtype=torch.long)
        self.active = torch.ones(rows, dtype=torch.bool)
        self.sampling = Sampling()


def generation(prior, cost, rows: int, window, seed: int, scale: float, cold: float = 1.0) -> tuple[float, float]:
    """One generation at `window` (an int, or "auto" from nothing measured) -> (mean window, seconds); its first
    `COLD` steps cost `cold` times more."""
    rng, tokens = random.Random(seed), prior_at(prior, rows, CANDIDATES)
    policy = AutoWindow(max_window=CANDIDATES[-1], memory=WindowMemory(prior=prior)) if window == "auto" else None
    state, chosen, seconds = State(rows), [], 0.0
    while (n := int(state.n[0])) < LENGTH:
        L = policy(state) if policy else window
        run = scale * (tokens[L][n * 8 // LENGTH] - 1) / BURST  # a run's extra tokens, on average
        k = 1 + (int(run) + (rng.random() < run % 1) if rng.random() < BURST else 0)
        k = max(1, min(k, L, LENGTH - n))
        s = cost(L, rows, n / LENGTH) * (cold if len(chosen) < COLD else 1.0)
        state.n += k
        seconds, chosen = seconds + s, chosen + [L]
        if policy:
            policy.observe(state, torch.full((rows,), k), s)
    return sum(chosen) / len(chosen), seconds


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--scale", type=float, default=1.0, help="the generations' extra tokens per step over the prior's")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--cold", type=float, default=1.0, help="the first steps of a generation cost this much more")
    args = ap.parse_args(argv)
    prior = load_prior(models_dir() / "emoji-image")["exact"]
    print("| costs | rows | auto: mean window | auto | fixed 4 | fixed 8 | fixed 16 |\n|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for rows in GPU:
            ar = generation(prior, MODELS[name], rows, 1, 0, args.scale, args.cold)[1]
            runs = {w: [generation(prior, MODELS[name], rows, w, seed, args.scale, args.cold)
                        for seed in range(args.seeds)]
                    for w in ["auto", 4, 8, 16]}
            speed = {w: sum(ar / s for _, s in r) / len(r) for w, r in runs.items()}
            mean = sum(m for m, _ in runs["auto"]) / args.seeds
            print(f"| {name} | {rows} | {mean:.1f} | " + " | ".join(f"{speed[w]:.2f}x" for w in runs) + " |")


if __name__ == "__main__":
    main()

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

`--engine`: the rows of an engine whose finished rows give their places to rows waiting (mmspec.engine), each row
committing its own bursty count from the prior at one row (a row's own tokens are the same in any batch), counted
alone (`DecodeState.groups`; `--rearmost`: by the batch's rearmost row, as before 2026-12-07), for `--steps` steps:
seconds per token against plain AR's. `--spread s`: each row's extra tokens are its own share of the prior's, drawn
uniformly from 1 - s .. 1 + s as it joins (prompts differ: emoji-image's took 60-103 forwards alone at 16).

  python benchmarks/window_synthetic.py --seeds 16 [--scale 1.3] [--engine [--spread 0.8] [--rearmost]]
"""
from __future__ import annotations

import argparse
import random
from functools import partial

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
        self.groups = None  # (one batch: a group)


def _commit(rng: random.Random, tokens: dict, L: int, n: int, scale: float) -> int:
    """A bursty count at L where the output is `n` tokens in, whose mean is the prior's `tokens` there."""
    run = scale * (tokens[L][n * 8 // LENGTH] - 1) / BURST  # a run's extra tokens, on average
    k = 1 + (int(run) + (rng.random() < run % 1) if rng.random() < BURST else 0)
    return max(1, min(k, L, LENGTH - n))


def generation(prior, cost, rows: int, window, seed: int, scale: float, cold: float = 1.0) -> tuple[float, float]:
    """One generation at `window` (an int, or "auto" from nothing measured) -> (mean window, seconds); its first
    `COLD` steps cost `cold` times more."""
    rng, tokens = random.Random(seed), prior_at(prior, rows, CANDIDATES)
    policy = AutoWindow(max_window=CANDIDATES[-1], memory=WindowMemory(prior=prior)) if window == "auto" else None
    state, chosen, seconds = State(rows), [], 0.0
    while (n := int(state.n[0])) < LENGTH:
        L = policy(state) if policy else window
        k = _commit(rng, tokens, L, n, scale)
        s = cost(L, rows, n / LENGTH) * (cold if len(chosen) < COLD else 1.0)
        state.n += k
        seconds, chosen = seconds + s, chosen + [L]
        if policy:
            policy.observe(state, torch.full((rows,), k), s)
    return sum(chosen) / len(chosen), seconds


def engine(prior, cost, rows: int, window, seed: int, scale: float, steps: int, spread: float = 0.0,
           rearmost: bool = False) -> tuple[float, float]:
    """`steps` steps of `rows` places at `window` (an int, or "auto" from nothing measured), each row on its own
    output with its own share of the extra tokens (1 +- `spread`) and counted alone (`rearmost`: by the batch's
    rearmost row), a finished row's place taken by a fresh row -> (mean window, seconds per token)."""
    rng, tokens = random.Random(seed), prior_at(prior, 1, CANDIDATES)
    policy = AutoWindow(max_window=CANDIDATES[-1], memory=WindowMemory(prior=prior)) if window == "auto" else None
    state, chosen, seconds, committed = State(rows), [], 0.0, 0
    state.groups = None if rearmost else list(range(rows))
    share = [scale * rng.uniform(1 - spread, 1 + spread) for _ in range(rows)]
    for _ in range(steps):
        L = policy(state) if policy else window
        k = torch.tensor([_commit(rng, tokens, L, n, s) for n, s in zip(state.n.tolist(), share)])
        s = cost(L, rows, float(state.n.float().mean()) / LENGTH)
        state.n += k
        seconds, chosen, committed = seconds + s, chosen + [L], committed + int(k.sum())
        if policy:
            policy.observe(state, k, s)
        for row in (state.n >= LENGTH).nonzero().flatten().tolist():  # (a row waiting takes the place)
            state.n[row], share[row] = 0, scale * rng.uniform(1 - spread, 1 + spread)
    return sum(chosen) / len(chosen), seconds / committed


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--scale", type=float, default=1.0, help="the generations' extra tokens per step over the prior's")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--cold", type=float, default=1.0, help="the first steps of a generation cost this much more")
    ap.add_argument("--engine", action="store_true", help="an engine's rows, each counted alone, joining as rows leave")
    ap.add_argument("--steps", type=int, default=2000, help="--engine: steps per run")
    ap.add_argument("--spread", type=float, default=0.0, help="--engine: rows' own shares of the extra tokens, 1 +- it")
    ap.add_argument("--rearmost", action="store_true", help="--engine: count by the batch's rearmost row")
    args = ap.parse_args(argv)
    prior = load_prior(models_dir() / "emoji-image")["exact"]
    run = partial(engine, steps=args.steps, spread=args.spread, rearmost=args.rearmost) if args.engine else \
        partial(generation, cold=args.cold)
    print("| costs | rows | auto: mean window | auto | fixed 4 | fixed 8 | fixed 16 |\n|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        for rows in [R for R in GPU if R > 1 or not args.engine]:
            ar = run(prior, MODELS[name], rows, 1, 0, args.scale)[1]
            runs = {w: [run(prior, MODELS[name], rows, w, seed, args.scale) for seed in range(args.seeds)]
                    for w in ["auto", 4, 8, 16]}
            speed = {w: sum(ar / s for _, s in r) / len(r) for w, r in runs.items()}
            mean = sum(m for m, _ in runs["auto"]) / args.seeds
            print(f"| {name} | {rows} | {mean:.1f} | " + " | ".join(f"{speed[w]:.2f}x" for w in runs) + " |")


if __name__ == "__main__":
    main()

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

`--oracle` (with `--engine`): two more arms that know each row's share and where it is, and take, step by step, the
windows that make the most tokens a second: one L for every row, and an L per row in a packed step (no padding), each
row charged its own L's share of a step, the fixed cost J of a wide step included, which a packed step would pay
once whatever its rows' windows: a bound on what windows per row could add to one for all.

  python -m benchmarks.window_synthetic --seeds 16 [--scale 1.3] [--engine [--spread 0.8] [--rearmost] [--oracle]]
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


def oracle(tokens: dict, price: list, n: list, share: list, per_row: bool) -> list:
    """The windows [rows] that make the most tokens a second in this step, knowing each row's mean tokens at each L
    (where it is, `n`, and its `share`) and `price`, a row's share of a step's cost at each of CANDIDATES: one L for
    all, or (`per_row`) each row its own."""
    gain = [[min(L, 1 + s * (tokens[L][i * 8 // LENGTH] - 1)) for L in CANDIDATES] for i, s in zip(n, share)]
    if not per_row:
        best = max(range(len(CANDIDATES)), key=lambda j: sum(g[j] for g in gain) / price[j])
        return [CANDIDATES[best]] * len(n)
    rate = 0.0
    for _ in range(4):  # Dinkelbach: each row its best gain - rate x price, until rate is what those windows make
        pick = [max(range(len(CANDIDATES)), key=lambda j: g[j] - rate * price[j]) for g in gain]
        rate = sum(g[j] for g, j in zip(gain, pick)) / sum(price[j] for j in pick)
    return [CANDIDATES[j] for j in pick]


def engine(prior, cost, rows: int, window, seed: int, scale: float, steps: int, spread: float = 0.0,
           rearmost: bool = False) -> tuple[float, float]:
    """`steps` steps of `rows` places at `window` (an int; "auto" from nothing measured; "oracle" or "per-row":
    `oracle`'s), each row on its own output with its own share of the extra tokens (1 +- `spread`) and counted alone
    (`rearmost`: by the batch's rearmost row), a finished row's place taken by a fresh row -> (mean window, seconds
    per token). A step costs the mean of its rows' L's costs (one L: a step at it)."""
    rng, tokens = random.Random(seed), prior_at(prior, 1, CANDIDATES)
    policy = AutoWindow(max_window=CANDIDATES[-1], memory=WindowMemory(prior=prior)) if window == "auto" else None
    state, chosen, seconds, committed = State(rows), [], 0.0, 0
    state.groups = None if rearmost else list(range(rows))
    share = [scale * rng.uniform(1 - spread, 1 + spread) for _ in range(rows)]
    for _ in range(steps):
        pos, n = float(state.n.float().mean()) / LENGTH, state.n.tolist()
        if window in ("oracle", "per-row"):
            price = [cost(L, rows, pos) / rows for L in CANDIDATES]
            Ls = oracle(tokens, price, n, share, per_row=window == "per-row")
        else:
            Ls = [policy(state) if policy else window] * rows
        k = torch.tensor([_commit(rng, tokens, L, i, s) for L, i, s in zip(Ls, n, share)])
        s = sum(cost(L, rows, pos) for L in Ls) / rows
        state.n += k
        seconds, chosen, committed = seconds + s, chosen + [sum(Ls) / rows], committed + int(k.sum())
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
    ap.add_argument("--oracle", action="store_true", help="--engine: the oracles' arms, one L for all and one a row")
    args = ap.parse_args(argv)
    if args.oracle and not args.engine:
        ap.error("--oracle needs --engine")
    prior = load_prior(models_dir() / "emoji-image")["exact"]
    run = partial(engine, steps=args.steps, spread=args.spread, rearmost=args.rearmost) if args.engine else \
        partial(generation, cold=args.cold)
    arms = ["auto", 4, 8, 16] + (["oracle", "per-row"] if args.oracle else [])
    print("| costs | rows | " + " | ".join(f"{w}" if isinstance(w, str) else f"fixed {w}" for w in arms)
          + " |\n|---|---|" + "---|" * len(arms))
    for name in args.models.split(","):
        for rows in [R for R in GPU if R > 1 or not args.engine]:
            ar = run(prior, MODELS[name], rows, 1, 0, args.scale)[1]
            runs = {w: [run(prior, MODELS[name], rows, w, seed, args.scale) for seed in range(args.seeds)]
                    for w in arms}
            speed = {w: sum(ar / s for _, s in r) / len(r) for w, r in runs.items()}
            mean = {w: sum(m for m, _ in r) / len(r) for w, r in runs.items()}  # windows, fixed ones included
            print(f"| {name} | {rows} | " + " | ".join(
                f"{speed[w]:.2f}x" + (f" ({mean[w]:.1f})" if isinstance(w, str) else "") for w in arms) + " |")


if __name__ == "__main__":
    main()

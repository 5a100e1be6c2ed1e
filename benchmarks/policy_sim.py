"""`auto` (the default `exact` with window="auto") on real generations timed by a virtual clock, against plain AR.

Every step costs a fixed time per L (as timed on the 2-core CPU at one row, 1 thread), growing along
the output (attention over a longer prefix): the policy sees these costs instead of the host's, so its variants
compare without the timing noise that moves a single CPU timing by 10-30%, and a run repeats exactly. The
generations are real: what each step commits is the model's. One row (each prompt alone) or 8 (the four prompts x 2
in one batch, whose time is that of its row furthest behind), `--seeds` seeds, the model's shipped acceptance prior,
nothing measured before (a first call). At 8 rows a step costs what the rows it runs cost: rows that are done leave
the forwards (mmspec.adapters.rows), or with `--done-rows stay` ride along to the end, as they did before.

  python benchmarks/policy_sim.py image --seeds 6 --variants base,one_row=1,fixed16
  (a variant: base; field=value of AutoConfig joined by +, e.g. stretch=8+recheck=48; or fixedN)
"""
from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import torch

from mmspec.bench import PROMPTS
from mmspec.pipelines import load_pipeline
from mmspec.window import AutoConfig, AutoWindow, FixedWindow, WindowMemories, batch_progress

# (kind, rows) -> ms per step at the start of the output by L, and how much a step's cost has grown by its end
# (2026-12-01, bundled models, 1 thread: at one row from traces of `auto`, emoji-image's AR 3.3 ms at the top and 4.3
# at the bottom; emoji-video at 8 rows, CFG's 16 sequences, the four prompts x 2 in one batch, every row to the end:
# the median step in the first quarter of the clip at each fixed L, the least of 3 runs, `exact` at 1 for AR,
# growing by 0.6-0.9 of it by the last quarter; emoji-image at 8 rows from the step costs `auto` timed near the top
# of the output, growing as at one row)
COSTS = {("image", 1): ({1: 3.3, 4: 4.4, 8: 5.2, 16: 6.6}, 0.3),
         ("image", 8): ({1: 5.0, 4: 7.5, 8: 13.0, 16: 21.0}, 0.3),
         ("video", 1): ({1: 5.6, 4: 6.0, 8: 7.0, 16: 9.0, 32: 15.0, 64: 21.0}, 0.3),
         ("video", 8): ({1: 7.9, 4: 13.7, 8: 19.7, 16: 33.1, 32: 64.5, 64: 129.6}, 0.7)}


def cost(kind: str, L: int, position: float, rows: int = 1) -> float:
    """Seconds a step at L over `rows` rows costs where the output is `position` (0..1) done: between the
    one-row and 8-row costs, linear in the rows (emoji-video at L = 8, whole runs: 8.9, 12.4, 21.3 and 33.3 ms a
    step at 1, 2, 4 and 8 rows)."""
    def at(costs):
        by_width, growth = costs
        return by_width[L] * (1 + growth * position) / 1000
    one = at(COSTS[kind, 1])
    return one if rows == 1 else one + (at(COSTS[kind, 8]) - one) * (rows - 1) / 7


class Clock:
    """Adds up the virtual cost of each step: its L, where the row furthest behind started it, the rows run."""

    def __init__(self, kind: str, stay: bool):
        self.kind, self.stay, self.elapsed, self.rows = kind, stay, 0.0, 1

    def running(self, state) -> None:  # before a step
        self.rows = state.batch_size if self.stay else int(state.active.sum())

    def tick(self, L: int, position: float) -> float:
        seconds = cost(self.kind, L, position, self.rows)
        self.elapsed += seconds
        return seconds


class ClockedAuto(AutoWindow):
    """AutoWindow that is told each step's virtual cost instead of its time."""

    def __init__(self, clock: Clock, **kwargs):
        super().__init__(**kwargs)
        self.clock = clock

    def __call__(self, state) -> int:
        self.clock.running(state)
        return super().__call__(state)

    def observe(self, state, k, seconds) -> None:
        super().observe(state, k, self.clock.tick(self.window, self.estimate.position))  # (position: where the step started)


class ClockedFixed(FixedWindow):
    def __init__(self, window: int, clock: Clock):
        super().__init__(window)
        self.clock = clock

    def __call__(self, state) -> int:
        self.clock.running(state)
        return super().__call__(state)

    def observe(self, state, k, seconds) -> None:
        lagging = batch_progress(state, k)
        if lagging is not None:
            self.clock.tick(self.max_window, lagging[1] / state.length)


def policy(variant: str, pipe, clock: Clock) -> "ClockedAuto | ClockedFixed":
    if variant.startswith("fixed"):
        return ClockedFixed(int(variant[len("fixed"):]), clock)
    memory = WindowMemories(None, pipe.window_memory.device, pipe.window_memory.prior,
                            pipe.window_memory.greedy_prior)["exact"]  # a first call
    settings = dict(setting.split("=") for setting in ([] if variant == "base" else variant.split("+")))
    unknown = sorted(set(settings) - {f.name for f in dataclasses.fields(AutoConfig)})
    if unknown:
        raise ValueError(f"AutoConfig has no field {unknown[0]!r}")
    config = dataclasses.replace(AutoConfig(), **{name: type(getattr(AutoConfig(), name))(float(value))
                                                  for name, value in settings.items()})
    auto = ClockedAuto(clock, max_window=pipe.default_window, memory=memory, config=config)
    return auto


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["image", "video"])
    ap.add_argument("--rows", type=int, default=1, choices=[1, 8], help="1: each prompt alone; 8: the four "
                    "prompts x 2 in one batch")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument("--variants", default="base", help="comma-separated (see the module's docstring)")
    ap.add_argument("--costs", help="ms per step by L at the start of the output, e.g. 1:3.3,4:4.4,8:5.0,16:5.6 "
                    "(this host's, in place of the table's for this kind and rows)")
    ap.add_argument("--prompts", help="|-separated prompts (default: the suite's four for the kind)")
    ap.add_argument("--done-rows", choices=["leave", "stay"], default="leave", help="at 8 rows: whether the rows "
                    "that are done leave the forwards (mmspec.adapters.rows) or ride along to the end")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if (args.kind, args.rows) not in COSTS:
        raise SystemExit(f"no step costs for {args.kind} at {args.rows} rows: {sorted(COSTS)}")
    if args.costs:
        COSTS[args.kind, args.rows] = ({int(L): float(ms) for L, ms in (c.split(":") for c in args.costs.split(","))},
                                       COSTS[args.kind, args.rows][1])
    variants = args.variants.split(",")
    pipe = load_pipeline(args.kind, window_cache="off")
    prompts = args.prompts.split("|") if args.prompts else PROMPTS[args.kind]
    batches = [[p] for p in prompts] if args.rows == 1 else [prompts]
    per_prompt = args.rows // len(batches[0]) if args.rows > 1 else 1
    ratios = {v: [] for v in variants}  # variant -> per batch, per seed: AR's virtual time / the variant's
    for batch in batches:
        for v in variants:
            ratios[v].append([])
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                call = {"seed": seed, "num_outputs": per_prompt}
                if args.kind == "video":  # the same first frames for every variant
                    call["image"] = pipe.image_model([p for p in batch for _ in range(per_prompt)], seed=seed,
                                                     method="ar")
                clock = Clock(args.kind, stay=args.done_rows == "stay")
                out = pipe(batch, method="exact", window=policy(v, pipe, clock), **call)
                N = out.stats.commit_step.shape[1]
                ar = sum(cost(args.kind, 1, n / N, args.rows) for n in range(N))  # (AR's rows finish together)
                ratios[v][-1].append(ar / clock.elapsed)
        print(", ".join(batch), " ".join(f"{v}: {np.mean(ratios[v][-1]):.3f}x" for v in variants), flush=True)
    summary = {}
    for v in variants:
        r = np.array(ratios[v])
        summary[v] = {"mean": float(r.mean()), "geomean": float(np.exp(np.log(r).mean())),
                      "worst_batch": float(r.mean(1).min())}
        print(f"all {v}: mean {r.mean():.3f}x, geometric {summary[v]['geomean']:.3f}x, worst batch "
              f"{summary[v]['worst_batch']:.3f}x")
    return summary


if __name__ == "__main__":
    main()

"""Target forwards per output of many requests on one engine (rows joining as rows leave), against lockstep batches
and against the ideal, counted in forwards: the same on any machine.

64 requests (the kind's prompts in turn, request i with seed i, one output each; video: frame 0 given, rendered once
by the image model; text: 64 new tokens after prompts of 6, 7 and 10 tokens, whose rows join a decode opened on a
shorter one as its rows are left-padded to theirs) run on an `Engine` of `--slots` places:
- engine: rows join a running decode as rows finish (`exact`, `ar`: at any step; other methods at any step where
  no token is given, else before a wave's first step: mmspec.engine);
- lockstep: the same engine with `joins_rows = False`, today's batches: the queue's first `slots` rows start
  together and the next start when all are done;
- ideal: each request's own forwards alone (batch 1), summed, over the slots: no row ever waits for a place.
Arrivals `at once` (all queued at forward 0) or `over time` (request i at forward i * gap, gap = the ideal's
forwards per output: the load the slots can just carry); for over time, the mean latency in forwards (arrival to
last token) too, against a request's own forwards alone. Windows are fixed (machine-independent); `auto` chooses on
measured times.

  python -m benchmarks.engine_forwards --kinds image,video --slots 8,16 --methods exact,coupled \\
      --out benchmarks/results/engine_forwards.json
"""
from __future__ import annotations

import argparse
import json

import torch

import mmspec
from mmspec.bench import PROMPTS
from mmspec.engine import Engine
from mmspec.layouts import Layout
from mmspec.pipelines import load_pipeline
from mmspec.plan import plan
from mmspec.sampling import merged

WINDOWS = {"image": 16, "video": 64, "text": 8}  # the pipelines' widest (default_window)
TEXT_TOKENS = 64  # a text request's new tokens (no stop: every row runs to its last)


class Lockstep(Engine):
    joins_rows = False  # rows join a wave only before its first step: batches in lockstep


def _requests(pipe, kind: str, count: int) -> list[tuple]:
    """(condition [1, cond_len] or a text prompt's [1], given [1, N] or None, seed) of each request."""
    prompts = [PROMPTS[kind][i % len(PROMPTS[kind])] for i in range(count)]
    given = [None] * count
    if kind == "text":
        return [([p], None, i) for i, p in enumerate(prompts)]
    if kind == "video":  # frame 0 as a video call gets it: the image model's, staged (rendered once, `ar`)
        first = pipe.image_model(prompts, seed=list(range(count)), method="ar")
        rows, _ = pipe._given(prompts, first, None)
        given = [rows[i:i + 1] for i in range(count)]
    return [(pipe.condition([p]), g, i) for i, (p, g) in enumerate(zip(prompts, given))]


def _layout(pipe) -> Layout:
    return mmspec.Sequence1D(TEXT_TOKENS) if pipe.kind == "text" else pipe.layout


def _alone(pipe, requests, method: str, window: int, sampling) -> list[int]:
    """Each request's forwards alone."""
    return [int(mmspec.generate(pipe.target, c, _layout(pipe), method=method, window=window, sampling=sampling,
                                 seed=s, given=g).stats.nfe.max()) for c, g, s in requests]


def _run(cls, pipe, requests, method: str, window: int, sampling, slots: int, arrivals: list[int]) -> dict:
    """Requests submitted at their arrival forward -> total forwards run and each request's latency in forwards."""
    engine = cls(pipe.target, _layout(pipe), plan(method, window), sampling, slots=slots)
    offset, pending, arrived, finished = 0, list(range(len(requests))), {}, {}

    def clock(step: int = -1) -> int:
        return offset + engine.forwards + step + 1

    def submit_due(now: int) -> None:
        while pending and arrivals[pending[0]] <= now:
            i = pending.pop(0)
            condition, given, seed = requests[i]
            arrived[i] = arrivals[i]
            engine.submit(condition, seed=seed, given=given, on_commit=hook(i))

    def hook(i):
        def on_commit(rows, k):
            now = clock(rows.step)
            if not bool(rows.active.any()):
                finished[i] = now
            submit_due(now)
        return on_commit

    while pending:  # idle until the next arrival: the clock moves on without forwards
        offset += max(0, arrivals[pending[0]] - clock())
        submit_due(clock())
        engine.run_until_idle()
    latency = [finished[i] - arrived[i] for i in range(len(requests))]
    return {"forwards": engine.forwards, "waves": engine.waves, "mean_latency": sum(latency) / len(latency)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="image,video")
    ap.add_argument("--slots", default="8,16")
    ap.add_argument("--methods", default="exact,coupled")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    results = []
    for kind in args.kinds.split(","):
        pipe = load_pipeline(kind, window_cache="off")
        sampling = merged(pipe.default_sampling, None)
        requests = _requests(pipe, kind, args.requests)
        for method in args.methods.split(","):
            window = WINDOWS[kind]
            alone = _alone(pipe, requests, method, window, sampling)
            for slots in map(int, args.slots.split(",")):
                ideal = sum(alone) / slots
                gap = round(ideal / len(requests)) or 1
                for arrival, times in (("at once", [0] * len(requests)),
                                       ("over time", [i * gap for i in range(len(requests))])):
                    row = {"kind": kind, "method": method, "window": window, "slots": slots, "arrival": arrival,
                           "ideal_per_output": ideal / len(requests), "alone_latency": sum(alone) / len(alone)}
                    for name, cls in (("engine", Engine), ("lockstep", Lockstep)):
                        run = _run(cls, pipe, requests, method, window, sampling, slots, times)
                        row[f"{name}_per_output"] = run["forwards"] / len(requests)
                        row[f"{name}_latency"] = run["mean_latency"]
                    row["engine_vs_ideal"] = row["engine_per_output"] / row["ideal_per_output"]
                    row["lockstep_vs_engine"] = row["lockstep_per_output"] / row["engine_per_output"]
                    results.append(row)
                    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}),
                          flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return {"results": results}


if __name__ == "__main__":
    main()

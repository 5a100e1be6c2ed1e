"""The time of one chain step of a draft head: a head forward over one token, as `eagle` drafts each slot after the
first (mmspec.drafters.eagle.HeadSession.forward, the cache pointer held so that every call writes the same slot).

The head is the bundled one of MODEL (`models/MODEL/head`), caught in a real generation (greedy, window 8), so its
cache, rows and dtypes are the ones `eagle` runs with. 1 thread; the median and the least of `--rounds` rounds of
`--calls` calls each. Run it at two commits, alternating, to see what a change to the head's forward saves:

    python -m benchmarks.head_forward text [--calls 1000] [--rounds 5]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.suite.cases import GREEDY
from mmspec.bench import PROMPTS
from mmspec.drafters.eagle import HeadSession
from mmspec.pipelines import load_pipeline


def caught_step(kind: str) -> tuple[HeadSession, tuple]:
    """A generation with `eagle` at window 8 -> the head session and the arguments of its first one-token forward."""
    pipe = load_pipeline(kind, window_cache="off")
    caught = []
    forward = HeadSession.forward

    def catch(self, hidden, tokens, start, columns=None, tree=None):
        if tokens.shape[1] == 1 and columns is None and tree is None and not caught:
            caught.append((self, (hidden.clone(), tokens.clone(), start.clone())))
        return forward(self, hidden, tokens, start, columns, tree)

    HeadSession.forward = catch
    try:
        call = {"max_new_tokens": 64} if kind == "text" else {}
        pipe(PROMPTS[kind][0], method="eagle", window=8, sampling=GREEDY, seed=0, **call)
    finally:
        HeadSession.forward = forward
    if not caught:
        raise SystemExit(f"{kind}: the head drafted no chain step (nothing past slot 0 was drafted)")
    return caught[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["text", "image", "video"])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    session, args = caught_step(a.kind)
    session.cache.advance = lambda slots: None  # every call writes the same slot
    for _ in range(50):
        session.forward(*args)
    times = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        for _ in range(a.calls):
            session.forward(*args)
        times.append((time.perf_counter() - t0) / a.calls * 1e3)
    print(f"{a.kind}: head forward over one token {statistics.median(times):.3f} ms median, {min(times):.3f} ms "
          f"least of {a.rounds} rounds x {a.calls} calls")


if __name__ == "__main__":
    main()

"""Methods at fixed windows or `auto` against `ar`, in one process, on the bundled image or video model: decode
seconds (the engine's own, `stats.seconds`: no prefill, no VQ decoding, no first frame), the least and the median of
the rounds, forwards per row, and whether each method gave `ar`'s tokens.

The arms alternate, in reverse order every other round, after an untimed `ar`; every `auto` run starts cold (the
model's shipped prior, nothing measured: a first call). On video every arm gets the same first frame, drawn once by
plain `ar` (`--first-frame` times the video call whole instead: the first frame by the image model inside it, with
`exact` and `auto` for a speculative method, as `mmspec generate video` does). `--dtype bfloat16` computes in bf16
(the weights are stored so): see benchmarks/README.md for what that does to `exact == ar` on a CPU. `--prompts`
at one row runs each prompt alone and adds their least times up (the suite's one-row figures are its first prompt's).

  python benchmarks/arms.py image --rows 4 --arms ar:1,exact:1,exact:auto,exact:16 --rounds 4
  python benchmarks/arms.py image --prompts "red heart|smiling face|dog face|sun" --rounds 2
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from mmspec.bench import PROMPTS
from mmspec.pipelines import PIPELINES
from mmspec.window import WindowMemories


def run(kind: str, rows: int, arms: list[tuple[str, "int | str"]], rounds: int, dtype=torch.float32,
        first_frame: bool = False, model=None, prompts: "list[str] | None" = None) -> dict:
    """-> {"method:window": figures}; `model`: a model folder (default: the bundled one of the kind)."""
    pipe = PIPELINES[kind].from_pretrained(model, dtype=dtype, window_cache="off")
    prompts = prompts or PROMPTS[kind]
    prompts = prompts[:1] if rows == 1 else prompts
    call = dict(num_outputs=max(1, rows // len(prompts)))
    if kind == "video" and not first_frame:
        call["image"] = pipe.image_model([p for p in prompts for _ in range(call["num_outputs"])], seed=0, method="ar")
    memory = pipe.window_memory
    pipe(prompts, method="ar", seed=0, **call)  # warm-up
    seconds = {arm: [] for arm in arms}
    tokens, nfe = {}, {}
    for r in range(rounds):
        for method, window in arms if r % 2 == 0 else arms[::-1]:
            pipe.window_memory = WindowMemories(None, memory.device, memory.prior, memory.greedy_prior)  # cold
            t0 = time.process_time()
            out = pipe(prompts, method=method, window=window, seed=0, **call)
            whole = time.process_time() - t0
            seconds[method, window].append(whole if first_frame else out.stats.seconds)
            tokens[method, window], nfe[method, window] = out.tokens, out.stats.nfe.float().mean().item()
    base = arms[0]
    return {f"{m}:{w}": {"least_s": min(seconds[m, w]), "median_s": statistics.median(seconds[m, w]),
                         "least_ratio": min(seconds[base]) / min(seconds[m, w]),
                         "median_ratio": statistics.median(seconds[base]) / statistics.median(seconds[m, w]),
                         "forwards_per_row": nfe[m, w], "same_tokens_as_first": bool(torch.equal(tokens[m, w], tokens[base]))}
            for m, w in arms}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["image", "video"])
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--arms", default="ar:1,exact:16,exact:auto", help="method:window, ... (the first is the baseline)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompts", help="|-separated; at one row each runs alone (default: the suite's, the first alone)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--first-frame", action="store_true", help="video: time the whole call, first frame included")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    arms = [(m, w if w == "auto" else int(w)) for m, w in (arm.split(":") for arm in a.arms.split(","))]
    prompts = a.prompts.split("|") if a.prompts else None
    groups = [[p] for p in prompts] if prompts and a.rows == 1 else [prompts]
    results = {}
    for group in groups:
        result = results[" | ".join(group or [])] = run(a.kind, a.rows, arms, a.rounds, getattr(torch, a.dtype),
                                                        a.first_frame, prompts=group)
        for arm, r in result.items():
            print(f"{a.kind} rows={a.rows} {', '.join(group or [])[:24]:24s} {arm:12s} least {r['least_s']:.3f} s "
                  f"{r['least_ratio']:.3f}x  median {r['median_s']:.3f} s {r['median_ratio']:.3f}x  forwards/row "
                  f"{r['forwards_per_row']:.0f}  tokens {'=' if r['same_tokens_as_first'] else '!='} "
                  f"{a.arms.split(',')[0]}", flush=True)
    if len(groups) > 1:  # each prompt alone: the arms' least times added up, against the first arm's
        total = {arm: sum(r[arm]["least_s"] for r in results.values()) for arm in next(iter(results.values()))}
        base = next(iter(total.values()))
        print("all prompts, least times added: " + "  ".join(f"{arm} {s:.3f} s {base / s:.3f}x"
                                                             for arm, s in total.items()), flush=True)
    return results


if __name__ == "__main__":
    main()

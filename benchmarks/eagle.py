"""Draft heads (method `eagle`) against plain AR and the Jacobi window, on a bundled model, in the same run.

Per method: forwards (NFE) per row and their ratio to AR's, tokens committed per forward, how often each draft
slot is accepted (does the head fix slot 0, the draft after the token the last step corrected?), and CPU time
against AR's. Runs the model's default sampling, and with --hot also temperature 1 without top-k / top-p (the
high-entropy regime real image models sample in). Video rows get their first frame given (as the pipeline does).

  python -m benchmarks.eagle image [--rows 1] [--window 6] [--seeds 1] [--hot] [--threads 1] [--out benchmarks/results/eagle]

On text at 1 row it also times eagle (text's default: the n-gram lookup's drafts where the head agrees) and its head
alone against transformers' assisted generation and prompt lookup (greedy and sampled, same prompt ids, same run,
best of --repeats), unless --no-transformers. --proactive 4,3 4,4 adds the head with proactive
branches of each shape (WIDTH,DEPTH), drawn and exact, at --window, and writes {kind}-rows{rows}-w{window}-branches;
--tree 32,8 64,8 the head with EAGLE-2 token trees of each shape (NODES,TOP_K; ar's tokens), and writes
{kind}-rows{rows}-w{window}[-branches]-trees.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mmspec.bench import PROMPTS
from mmspec.pipelines import load_pipeline
from benchmarks.suite.cases import row_seeds


def methods(window: int, jacobi_window: int, proactive: list[list[int]] = (),
            trees: list[list[int]] = ()) -> list[tuple[str, object, object]]:
    """(label, spec, window): the head's spec names no folder: the pipeline gives the model's head/. With proactive
    shapes or tree shapes: ar, the head's chain and the head with branches of each shape, drawn and exact, and with
    a token tree of each shape (NODES, TOP_K: ar's tokens with or without exact), at `window`."""
    if proactive or trees:
        return [("ar", "ar", 1), (f"eagle {window}", "eagle", window),
                (f"eagle exact {window}", {"name": "eagle", "exact": True}, window)] + [
            (f"eagle{' exact' if exact else ''} proactive={w},{d} {window}",
             {"name": "eagle", **({"exact": True} if exact else {}), "proactive": [w, d]}, window)
            for w, d in proactive for exact in (False, True)] + [
            (f"eagle tree={n},{k} {window}", {"name": "eagle", "tree": [n, k]}, window) for n, k in trees]
    return [("ar", "ar", 1), ("exact auto", "exact", "auto"), (f"exact {jacobi_window}", "exact", jacobi_window),
            (f"eagle {window}", "eagle", window), (f"eagle head-only {window}", {"name": "eagle", "lookup": False}, window),
            (f"eagle exact {window}", {"name": "eagle", "exact": True}, window),
            (f"eagle exact jacobi=1 {jacobi_window}", {"name": "eagle", "exact": True, "jacobi": 1}, jacobi_window),
            (f"eagle exact jacobi=2 {jacobi_window}", {"name": "eagle", "exact": True, "jacobi": 2}, jacobi_window),
            ("eagle exact auto", {"name": "eagle", "exact": True}, "auto")]


def run(pipe, kind: str, rows: int, window: int, jacobi_window: int, sampling, prompts: list[str],
        proactive: list[list[int]] = (), seeds: int = 1, trees: list[list[int]] = ()) -> list[dict]:
    call = {"max_new_tokens": 128} if kind == "text" else {}
    batches = [[p] * rows for p in prompts for _ in range(seeds)]  # batch i runs seed i % seeds
    if kind == "video":  # the same first frame for every method: the video model's own work only
        firsts = [pipe.image_model(b, seed=row_seeds(0, rows), method="ar") for b in batches]
    specs = methods(window, jacobi_window, proactive, trees)
    nfe, tokens, cpu = ([0.0] * len(specs) for _ in range(3))
    accepted, forwards = [None] * len(specs), [None] * len(specs)
    for i, batch in enumerate(batches):  # methods interleaved per batch: CPU time ratios survive others' load
        extra = {"image": firsts[i]} if kind == "video" else {}
        for m, (label, spec, w) in enumerate(specs):
            c0 = time.process_time()
            out = pipe(batch, seed=row_seeds(i % seeds, rows), method=spec, window=w, sampling=sampling, **call,
                       **extra)
            cpu[m] += time.process_time() - c0
            s = out.stats
            nfe[m] += float(s.nfe.float().mean())
            tokens[m] += float(s.committed.sum()) / rows
            a, f = s.accepted_at.sum(0).float(), s.forwards_at.sum(0).float()
            accepted[m] = a if accepted[m] is None else _pad_add(accepted[m], a)
            forwards[m] = f if forwards[m] is None else _pad_add(forwards[m], f)
    results = []
    for m, (label, _, _) in enumerate(specs):
        per_slot = (accepted[m] / forwards[m].clamp(min=1))[:8]
        results.append({"method": label, "nfe_per_row": round(nfe[m] / len(batches), 1),
                        "tokens_per_forward": round(tokens[m] / nfe[m], 3), "cpu_seconds": round(cpu[m], 2),
                        "accepted_per_slot": [round(float(x), 3) for x in per_slot]})
        print(f"  {label:32s} nfe {results[-1]['nfe_per_row']:7.1f}  tok/fwd {results[-1]['tokens_per_forward']:5.2f}"
              f"  cpu {cpu[m]:6.2f}s  slots {results[-1]['accepted_per_slot']}", flush=True)
    ar = results[0]
    for r in results:
        r["nfe_ratio"] = round(ar["nfe_per_row"] / r["nfe_per_row"], 2)
        r["cpu_speedup"] = round(ar["cpu_seconds"] / r["cpu_seconds"], 2)
    return results


def _pad_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    n = max(len(a), len(b))
    return torch.nn.functional.pad(a, (0, n - len(a))) + torch.nn.functional.pad(b, (0, n - len(b)))


def markdown(kind: str, rows: int, table: dict[str, list[dict]]) -> str:
    lines = []
    for regime, results in table.items():
        lines += [f"### {kind}, {rows} row(s), {regime}", "",
                  "| method | NFE/row | NFE ratio | tokens/forward | CPU speed-up | accepted at slot 0, 1, 2, ... |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['method']} | {r['nfe_per_row']} | {r['nfe_ratio']}x | {r['tokens_per_forward']} | "
                  f"{r['cpu_speedup']}x | {r['accepted_per_slot']} |" for r in results]
        lines.append("")
    return "\n".join(lines)


def against_transformers(pipe, window: int, trees: list[list[int]] = (), repeats: int = 2) -> dict:
    """code-text at 1 row, greedy and sampled: tokens per second of eagle, of its head alone (no lookup drafts), and of
    eagle with each token tree shape, at the pipeline's default window and at `window`, against transformers' assisted
    generation (with the bundled draft model) and prompt lookup, on the same prompt ids, in the same run
    (benchmarks/suite/run.py's text case; the best of `repeats` interleaved runs)."""
    from benchmarks.suite.cases import GREEDY, SAMPLED, TextCase
    from benchmarks.suite.run import run_text
    from mmspec.bench import Entry

    heads = [Entry(spec, w, label + (f" w={w}" if w else "")) for w in (None, window)
             for spec, label in (("eagle", "eagle"), ({"name": "eagle", "lookup": False}, "eagle head-only"))] + [
        Entry({"name": "eagle", "tree": [n, k]}, w, f"eagle tree={n},{k}" + (f" w={w}" if w else ""))
        for n, k in trees for w in (None, window)]
    out = {}
    for name, sampling in (("greedy", GREEDY), ("sampled", SAMPLED)):
        case = TextCase(1, sampling, ("ar", *heads, "draft-model", "lookup"), ("generate", "assisted", "prompt-lookup"),
                        prompts=3, repeats=repeats)
        results = run_text(pipe, case, seed=0, max_new_tokens=128)["results"]
        tps = {k: v["tokens_per_second"] for k, v in results.items()}
        out[name] = {"tokens_per_second": {k: round(v, 1) for k, v in tps.items()}}
        for head in map(str, heads):
            key = head.replace(" ", "_").replace("=", "").replace(",", "x")
            out[name][f"{key}_vs_assisted"] = round(tps[f"mmspec {head}"] / tps["transformers assisted"], 2)
            out[name][f"{key}_vs_prompt_lookup"] = round(tps[f"mmspec {head}"] / tps["transformers prompt-lookup"], 2)
        print(f"  {name}: {out[name]}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["image", "video", "text"])
    ap.add_argument("--rows", type=int, default=1)
    ap.add_argument("--window", type=int, default=6, help="the head's chain window (default 6)")
    ap.add_argument("--jacobi-window", type=int, default=16, help="the window of exact and of head + Jacobi")
    ap.add_argument("--prompts", type=int, default=4, help="how many of the bench prompts (default 4)")
    ap.add_argument("--seeds", type=int, default=1, help="runs of each prompt, with seeds 0 .. SEEDS-1 (default 1)")
    ap.add_argument("--hot", action="store_true", help="also temperature 1 without top-k / top-p")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--proactive", nargs="+", default=[], metavar="WIDTH,DEPTH",
                    help="the head with proactive branches of these shapes instead of the Jacobi comparisons")
    ap.add_argument("--tree", nargs="+", default=[], metavar="NODES,TOP_K",
                    help="the head with token trees of these shapes (EAGLE-2) instead of the Jacobi comparisons")
    ap.add_argument("--no-transformers", action="store_true", help="text: skip the transformers comparison")
    ap.add_argument("--repeats", type=int, default=2, help="text: timed runs of each against transformers, best kept")
    ap.add_argument("--out", default="benchmarks/results/eagle")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    proactive = [[int(x) for x in shape.split(",")] for shape in args.proactive]
    trees = [[int(x) for x in shape.split(",")] for shape in args.tree]
    pipe = load_pipeline(args.kind, window_cache="off")
    prompts = PROMPTS[args.kind][: args.prompts]
    regimes = {"default sampling": None}
    if args.hot:
        regimes["temperature 1, no top-k / top-p"] = {**{k: v for k, v in pipe.default_sampling.items()
                                                        if k not in ("top_k", "top_p")}, "temperature": 1.0}
    table = {}
    for regime, sampling in regimes.items():
        print(f"{args.kind}, {args.rows} row(s), {regime}:", flush=True)
        table[regime] = run(pipe, args.kind, args.rows, args.window, args.jacobi_window, sampling, prompts, proactive,
                            args.seeds, trees)
    compare = args.kind == "text" and args.rows == 1 and not args.no_transformers
    versus = against_transformers(pipe, args.window, trees, args.repeats) if compare else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{args.kind}-rows{args.rows}" + (f"-w{args.window}" if proactive or trees else "") + (
        "-branches" if proactive else "") + ("-trees" if trees else "")
    (out / f"{stem}.json").write_text(json.dumps({"kind": args.kind, "rows": args.rows, "threads": args.threads,
                                                  "window": args.window, "seeds": args.seeds, "prompts": prompts, "results": table, "transformers": versus},
                                                 indent=1))
    text = markdown(args.kind, args.rows, table)
    if versus:
        text += "\n### against transformers (tokens per second, 1 row, 128 new tokens)\n\n" + "\n".join(
            f"- {name}: {v['tokens_per_second']}; " + ", ".join(f"{k} {x}x" for k, x in v.items() if k.endswith(
                ("_vs_assisted", "_vs_prompt_lookup"))) for name, v in versus.items()) + "\n"
    (out / f"{stem}.md").write_text(text)
    print("wrote", out / f"{stem}.md")


if __name__ == "__main__":
    main()

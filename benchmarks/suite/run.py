"""Run a suite: one function per kind of case, each returning plain figures (JSON-ready)."""
from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable

from mmspec.bench import as_entry, environment, row_tokens, run_benchmark, time_runs
from mmspec.pipelines import load_pipeline
from mmspec.lossless import check_lossless, format_lossless
from benchmarks.suite.cases import (TRANSFORMERS_PAIRS, CountCase, GridCase, LosslessCase, TextCase, prompts_for,
                                    row_seeds)
from benchmarks.suite.counts import run_counts
from benchmarks.suite.hf import describe, hf_generate
from benchmarks.suite.report import sampling_name


def run_grid(pipeline, case: GridCase, seed: int, **_) -> dict:
    # entries without a window of their own run at the pipeline's default window (a call without one gets "auto")
    rows = run_benchmark(pipeline, prompts_for(case.kind, case.rows), list(case.entries), repeats=case.repeats,
                         num_outputs=1, seed=row_seeds(seed, case.rows), window=pipeline.default_window)
    for row in rows:
        del row["output"]
    return {"results": rows}


def run_lossless(pipeline, case: LosslessCase, seed: int, max_new_tokens: int, **_) -> dict:
    call = {"max_new_tokens": max_new_tokens} if case.kind == "text" else {}
    check = check_lossless(pipeline, prompts_for(case.kind, case.rows), list(case.entries), num_outputs=1,
                           seed=row_seeds(seed, case.rows), **call)
    return {"check": check, "line": format_lossless(check)}


def run_text(pipeline, case: TextCase, seed: int, max_new_tokens: int, **_) -> dict:
    """Tokens per second of mmspec methods and transformers baselines; a baseline transformers refuses for these
    settings (assisted generation of a batch) is recorded with its error instead."""
    prompts, sampling = prompts_for("text", case.prompts), case.sampling
    batches = [prompts[i:i + case.rows] for i in range(0, len(prompts), case.rows)]
    entries = [as_entry(m) for m in case.methods]

    def mmspec(e):
        call = e.call({"sampling": sampling, "seed": seed, "max_new_tokens": max_new_tokens})
        return lambda: [t for b in batches for t in row_tokens(pipeline(b, method=e.method, **call))]

    def transformers(baseline):
        ids = [pipeline.target.encode(b) for b in batches]
        return lambda: [t for b in ids for t in hf_generate(pipeline, b, baseline, sampling, max_new_tokens, seed)]

    runs = {f"mmspec {e}": mmspec(e) for e in entries}
    refused = {}
    for baseline in case.baselines:
        run = transformers(baseline)
        try:
            run()  # its warm-up, and whether transformers accepts these settings at all
        except ValueError as err:
            refused[baseline] = str(err)
            continue
        runs[f"transformers {baseline}"] = run
    timed = time_runs(runs, case.repeats, warmup=[f"mmspec {e}" for e in entries])
    results = {}
    for name, t in timed.items():
        new = sum(len(tokens) for tokens in t.result)
        results[name] = {"tokens": new, "seconds": t.seconds, "cpu_seconds": t.cpu_seconds,
                         "tokens_per_second": new / t.seconds, "tokens_per_cpu_second": new / t.cpu_seconds}
    if case.greedy and "transformers generate" in timed:  # greedy: every method must produce generate's tokens
        reference = timed["transformers generate"].result
        for name, t in timed.items():
            same = sum(a.equal(b) for a, b in zip(t.result, reference))
            results[name]["identical_to_generate"] = {"identical": same, "rows": len(reference)}
    pairs = _pairs(case, results)
    best = max(pairs, key=lambda p: p["ratio"]) if case.rows > 1 and pairs else None
    return {"results": results, "refused": refused,
            "baselines": {b: describe(b) for b in case.baselines}, "pairs": pairs, "best": best}


def _pairs(case: TextCase, results: dict) -> list[dict]:
    """Each mmspec method against its transformers counterpart (batch 1) or against `generate` (batches,
    where transformers has nothing else)."""
    pairs = []
    for m in map(str, map(as_entry, case.methods)):
        baseline = TRANSFORMERS_PAIRS.get(m, "generate") if case.rows == 1 else "generate"
        theirs = results.get(f"transformers {baseline}")
        if theirs is not None:
            ours = results[f"mmspec {m}"]
            pairs.append({"mmspec": m, "transformers": baseline,
                          "ratio": ours["tokens_per_second"] / theirs["tokens_per_second"],
                          "cpu_ratio": ours["tokens_per_cpu_second"] / theirs["tokens_per_cpu_second"]})
    return pairs


RUNNERS: dict[type, Callable[..., dict]] = {GridCase: run_grid, LosslessCase: run_lossless, TextCase: run_text,
                                            CountCase: run_counts}


def run_suite(cases: list, *, device: str = "cpu", models: dict | None = None, draft=None, seed: int = 0,
              max_new_tokens: int = 64, log=None, on_case=None) -> dict:
    """Run every case, loading each kind's pipeline once. models: {kind: folder} (default: the bundled ones);
    draft: the text model's draft folder; log(line) reports progress (default: stderr); on_case(result so far)
    after each case (e.g. to save partial results). -> {"environment", "settings", "cases": [{"case", "kind",
    "seconds", "cpu_seconds", ...figures}], "seconds", "cpu_seconds"}: cpu_seconds is this process's CPU time,
    which on a machine shared with other work says what the suite costs when it has the CPU to itself."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    models = models or {}
    pipelines = {}
    t0, cpu0, results = time.perf_counter(), time.process_time(), []
    result = {"environment": environment(device), "cases": results}
    for i, case in enumerate(cases):
        if case.kind not in pipelines:
            pipelines[case.kind] = load_pipeline(  # window_cache off: measure what a first call gets
                case.kind, models.get(case.kind), draft if case.kind == "text" else None, device, window_cache="off")
        pipeline = pipelines[case.kind]
        t_case, cpu_case = time.perf_counter(), time.process_time()
        figures = RUNNERS[type(case)](pipeline, case, seed=seed, max_new_tokens=max_new_tokens)
        results.append({"case": type(case).__name__, **_describe(case), "seconds": time.perf_counter() - t_case,
                        "cpu_seconds": time.process_time() - cpu_case, **figures})
        log(f"[{i + 1}/{len(cases)}] {_title(results[-1])}: {results[-1]['seconds']:.1f} s")
        if "line" in figures:
            log(figures["line"])
        if on_case is not None:
            on_case(result)
    result["settings"] = {
        "seed": seed, "max_new_tokens": max_new_tokens, "draft": _draft_name(draft, pipelines.get("text")),
        "models": {kind: str(models.get(kind) or f"bundled {type(p).default_model}") for kind, p in pipelines.items()},
        "default_windows": {kind: p.default_window for kind, p in pipelines.items()},
        "default_sampling": {kind: dict(p.default_sampling) for kind, p in pipelines.items()}}
    result.update(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - cpu0)
    return result


def _draft_name(draft, text) -> str | None:
    if text is None or text.draft_model is None:
        return None
    return str(draft) if draft else f"bundled {text.default_draft}"


def _describe(case) -> dict:
    """A case as JSON: its fields, entries as labels with their method, window and the method they run."""
    fields = {f.name: getattr(case, f.name) for f in dataclasses.fields(case)} | {"rows": case.rows}
    if "entries" in fields:
        fields["entries"] = [{"label": str(e), "method": e.name, "window": e.window} for e in case.entries]
    return fields


def _title(result: dict) -> str:
    sampling = sampling_name(result.get("sampling") or {})
    what = {"GridCase": f"{result.get('sweep')} sweep", "LosslessCase": "lossless check",
            "TextCase": f"text against transformers, {sampling}",
            "CountCase": "forward counts" + ", one row at a time" * bool(result.get("one_row"))
            + f", {sampling} over the model's default" * bool(result.get("over_default"))}[result["case"]]
    return f"{result['kind']} {result['rows']} row(s), {what}"

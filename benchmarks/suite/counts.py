"""The acceptance suite's runner: forward counts, acceptance per window slot and the TV / entropy diagnosis of
each entry of a CountCase, against `ar` on the same rows and seeds. Nothing is timed, so a shared CPU does
not disturb the figures."""
from __future__ import annotations

import dataclasses

import torch

from mmspec.bench import identical_rows
from mmspec.methods import Method
from mmspec.stats import Stats
from benchmarks.suite.cases import CountCase, prompts_for, row_seeds, spec_label
from benchmarks.suite.measure import generated, measured


def run_counts(pipeline, case: CountCase, seed: int, max_new_tokens: int, **_) -> dict:
    """-> {"results": one row of figures per entry (see _figures), with ratios against the case's `ar`;
    "sampling_used": what every call sampled with}."""
    calls = _calls(pipeline, case, seed)
    sampling = {**pipeline.default_sampling, **case.sampling} if case.over_default else case.sampling
    fixed = {"sampling": sampling} if sampling else {}
    if case.kind == "text":
        fixed["max_new_tokens"] = max_new_tokens
    rows, ar = [], None
    for e in case.entries:
        method = measured(_method(pipeline, e.method))  # one measuring verifier pools all the entry's calls
        outs = [pipeline(method=method, **e.call({**fixed, **c})) for c in calls]
        row = {"label": str(e), "method": spec_label(e.method), "name": e.name, **_figures(outs, method)}
        if e.name == "ar":
            ar = outs
        elif ar is not None:  # `exact` must give ar's tokens: the wrapper must not change what is generated
            row["identical_to_ar"] = sum(identical_rows(a, b) for a, b in zip(outs, ar))
        rows.append(row)
    base = next((r for r in rows if r["name"] == "ar"), None)
    for row in rows if base else ():
        row["nfe_ratio"] = base["nfe_per_row"] / row["nfe_per_row"]
        row["generated_nfe_ratio"] = base["generated_forwards_per_row"] / row["generated_forwards_per_row"]
        row["batch_nfe_ratio"] = base["batch_forwards"] / row["batch_forwards"]
    return {"results": rows, "sampling_used": sampling or dict(pipeline.default_sampling)}


def _calls(pipeline, case: CountCase, seed: int) -> list[dict]:
    """The pipeline calls of every entry: one batch (prompt-major, row r with seed + r), or each row alone with
    the seed it has in the batch. Video: frame 0 is rendered once here and given to every call as image=:
    the pipeline would render the very same pictures at each call (AR's pictures for the seeds, whatever the method)."""
    prompts = prompts_for(case.kind, case.prompts)
    first = None
    if getattr(pipeline, "image_model", None) is not None:
        rows = [p for p in prompts for _ in range(case.samples)]
        first = pipeline._render_first_frames(rows, seed=row_seeds(seed, case.rows), progress_bar=False)
    if not case.one_row:
        return [{"prompt": prompts, "num_outputs": case.samples, "seed": row_seeds(seed, case.rows),
                 **_image(first, slice(None))}]
    return [{"prompt": prompts[r // case.samples], "num_outputs": 1, "seed": seed + r, **_image(first, slice(r, r + 1))}
            for r in range(case.rows)]


def _image(first, rows: slice) -> dict:
    """image= for a call: the rendered first frames of its rows, if there are any."""
    return {} if first is None else {"image": dataclasses.replace(first, images=first.images[rows])}


def _method(pipeline, spec) -> Method:
    """A method spec as a Method, with the pipeline's draft model or draft head where it needs one."""
    return pipeline.resolve(spec)


def _pooled(stats: list[Stats]) -> Stats:
    """The per-row statistics of several calls as one batch (same layout and window)."""
    fields = ("nfe", "committed", "drafted", "accepted", "accepted_at", "forwards_at", "commit_step")
    return Stats(*(torch.cat([getattr(s, f) for s in stats]) for f in fields), window=stats[0].window)


def _figures(outs: list, method: Method) -> dict:
    """Forwards and acceptance of one entry's outputs, and its measuring verifier's diagnosis.
    nfe_per_row counts every forward, as the quick suite does (also one that commits only given or structural
    tokens, where they end the layout); generated_forwards_per_row counts the forwards
    that committed at least one token the model chose (see measure.generated); single_share: the share of
    those that committed only one."""
    s = _pooled([o.stats for o in outs])
    g = generated(s.commit_step, torch.cat(method.verifier.free))
    rows, forwards, tokens = len(s.nfe), g["forwards"].sum().item(), g["tokens"].sum().item()
    return {"rows": rows, "window": s.window, "nfe_per_row": s.nfe.float().mean().item(),
            "batch_forwards": sum(o.stats.total_nfe for o in outs) / len(outs),
            "mean_acceptance_length": s.mean_acceptance_length, "acceptance_rate": s.acceptance_rate,
            "acceptance_per_position": s.acceptance_per_position, "generated_forwards_per_row": forwards / rows,
            "generated_tokens_per_row": tokens / rows, "generated_mean_acceptance_length": tokens / max(forwards, 1),
            "single_share": g["single"].sum().item() / max(forwards, 1), "diagnosis": method.verifier.summary()}

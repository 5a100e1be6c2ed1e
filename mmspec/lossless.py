"""The lossless check a benchmark prints beside its speed figures, on whatever model it runs.

Two guarantees that hold on any model and can be checked in a few runs:
- `exact` equals `ar` token for token with the same seed (same prompts, sampling and window);
- at temperature 0 every method gives what `ar` gives (greedy decoding is deterministic).
A method that fails either changed what the model generates; the check says so loudly.
"""
from __future__ import annotations

import copy

import torch

from mmspec.bench import as_entry, identical_rows, row_tokens
from mmspec.rng import Streams
from mmspec.sampling import Sampling

# Scores (log p + Gumbel noise) closer than this are a rounding tie: fp32 forwards of different L round the
# logits differently by ~1e-5 nats on the bundled models, while a changed law moves scores by far more.
TIE = 1e-3


def check_lossless(pipeline, prompts: list, methods: list, *, outputs: dict | None = None, **call) -> dict:
    """pipeline(prompts, method=..., **call) for `ar` and `exact`, compared row by row, then `ar` and every
    method (names, {'name': ...} dicts or bench Entries) at temperature 0, one output per prompt (greedy
    outputs of a prompt are all alike). outputs: {'ar': ..., 'exact': ...} already produced with these
    prompts and this call (a benchmark's last runs), reused instead of run again.
    -> {"exact_equals_ar": {"identical", "rows"}, "greedy": {method: {"identical", "rows"}}, "ok"}."""
    outputs = outputs or {}
    ar, exact = (outputs.get(m) or pipeline(prompts, method=m, **call) for m in ("ar", "exact"))
    sampling = {**(call.get("sampling") or pipeline.default_sampling), "temperature": 0.0}
    greedy_call = {**call, "sampling": sampling, "num_outputs": 1}
    reference = pipeline(prompts, method="ar", **greedy_call)
    greedy = {}
    for e in map(as_entry, methods):
        if e.name != "ar":
            out = pipeline(prompts, method=e.method, **e.call(greedy_call))
            greedy[str(e)] = {"identical": identical_rows(out, reference), "rows": len(row_tokens(reference))}
    gaps = _tie_gaps(pipeline, prompts, call, ar, exact)
    result = {"exact_equals_ar": {"identical": identical_rows(exact, ar), "rows": len(row_tokens(ar)),
                                  "ties": [g for g in gaps if g is not None and g < TIE]},
              "greedy": greedy}
    same = result["exact_equals_ar"]
    result["ok"] = (same["identical"] + len(same["ties"]) == same["rows"]
                    and all(c["identical"] == c["rows"] for c in greedy.values()))
    return result


def _tie_gaps(pipeline, prompts: list, call: dict, ar, exact) -> list:
    """For each row where exact and ar differ: the fp64 score gap between their tokens at the first difference
    (None where the pipeline cannot recompute p: only grid pipelines can)."""
    rows = [p for p in prompts for _ in range(call.get("num_outputs", 1))]
    seed = call.get("seed", 0)
    seeds = [seed + i % call.get("num_outputs", 1) for i in range(len(rows))] if isinstance(seed, int) else list(seed)
    gaps = []
    for r, (a, b) in enumerate(zip(row_tokens(ar), row_tokens(exact))):
        if torch.equal(a, b):
            continue
        if not hasattr(pipeline, "condition") or a.shape != b.shape:
            gaps.append(None)
            continue
        i = int((a != b).nonzero()[0])  # the rows agree before it: both chose here under the same context
        gaps.append(abs(score_gap(pipeline, rows[r], seeds[r], a, i, int(b[i]), call.get("sampling"))))
    return gaps


def score_gap(pipeline, prompt: str, seed: int, tokens: torch.Tensor, index: int, other: int,
              sampling: "dict | None" = None) -> float:
    """log p + g of tokens[index] minus that of `other` at the same index, recomputed in fp64 by one teacher-forced
    forward of a copy of a grid pipeline's model over `tokens` [N] (row seed `seed`): how close to a tie the choice
    between them was, which tells a rounding tie from a changed token."""
    model = copy.deepcopy(pipeline.target.model).double()
    cond = pipeline.condition([prompt]).to(tokens.device)
    positions = pipeline.layout.positions()
    with torch.no_grad():
        c = model.forward_sequence(cond, tokens[None], positions)[0, index]
        u = model.forward_sequence(model.null_condition(1), tokens[None], positions)[0, index]
    sampling = Sampling.coerce(sampling if sampling is not None else pipeline.default_sampling)
    score = sampling.logp(c, u if sampling.cfg else None).double()
    score = score + Streams([seed], model.config.vocab_size, tokens.device).gumbel(torch.tensor([[index]]))[0, 0]
    return float(score[int(tokens[index])] - score[other])


def format_lossless(check: dict) -> str:
    """One line when everything agrees; when anything differs, a loud block naming each mismatch."""
    exact, greedy = check["exact_equals_ar"], check["greedy"]
    agree = [m for m, c in greedy.items() if c["identical"] == c["rows"]]
    ties = exact.get("ties", [])
    tied = (f", {len(ties)} more differing only after a rounding tie (score gaps "
            f"{', '.join(f'{g:.0e}' for g in ties)} nats < {TIE:g})") if ties else ""
    same = exact["identical"] + len(ties) == exact["rows"]
    line = (f"exact == ar token for token: {'yes' if same else 'NO'} ({exact['identical']}/{exact['rows']} rows"
            f"{tied}); greedy agreement with ar: {len(agree)}/{len(greedy)} methods")
    if check["ok"]:
        return line
    changed = exact["rows"] - exact["identical"] - len(ties)
    bad = [f"  exact differs from ar on {changed} of {exact['rows']} rows"] if changed else []
    bad += [f"  {m} at temperature 0 differs from ar on {c['rows'] - c['identical']} of {c['rows']} rows"
            for m, c in greedy.items() if c["identical"] < c["rows"]]
    return "\n".join(["!" * 72, "LOSSLESS CHECK FAILED: a method changed what this model generates", line, *bad,
                      "!" * 72])

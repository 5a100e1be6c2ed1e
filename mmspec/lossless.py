"""The lossless check a benchmark prints beside its speed figures, on whatever model it runs.

Two guarantees that hold on any model and can be checked in a few runs:
- `exact` equals `ar` token for token with the same seed (same prompts, sampling and window);
- at temperature 0 every method gives what `ar` gives (greedy decoding is deterministic).
A method that fails either changed what the model generates; the check says so loudly.
"""
from __future__ import annotations

from mmspec.bench import as_entry, identical_rows, row_tokens


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
    result = {"exact_equals_ar": {"identical": identical_rows(exact, ar), "rows": len(row_tokens(ar))},
              "greedy": greedy}
    result["ok"] = all(c["identical"] == c["rows"] for c in [result["exact_equals_ar"], *greedy.values()])
    return result


def format_lossless(check: dict) -> str:
    """One line when everything agrees; when anything differs, a loud block naming each mismatch."""
    exact, greedy = check["exact_equals_ar"], check["greedy"]
    agree = [m for m, c in greedy.items() if c["identical"] == c["rows"]]
    line = (f"exact == ar token for token: {'yes' if exact['identical'] == exact['rows'] else 'NO'} "
            f"({exact['identical']}/{exact['rows']} rows); greedy agreement with ar: {len(agree)}/{len(greedy)} methods")
    if check["ok"]:
        return line
    bad = [f"  exact differs from ar on {exact['rows'] - exact['identical']} of {exact['rows']} rows"
           ] if exact["identical"] < exact["rows"] else []
    bad += [f"  {m} at temperature 0 differs from ar on {c['rows'] - c['identical']} of {c['rows']} rows"
            for m, c in greedy.items() if c["identical"] < c["rows"]]
    return "\n".join(["!" * 72, "LOSSLESS CHECK FAILED: a method changed what this model generates", line, *bad,
                      "!" * 72])

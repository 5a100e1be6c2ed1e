"""The field's table on a user's own checkpoint: every method against plain AR over a set of inputs, one input at a
time (batch 1, as SJD, SJD-PAC, GSD and SCD measure), laid out as SJD-PAC and SCD report theirs.

Per method and window: steps compression (AR's forwards / the method's, over the whole set), latency against AR
(wall-clock over the whole set, each input's runs round-robin, best of the repeats), mean acceptance length
(tokens per forward), tokens per second, and for `exact` whether every input's tokens are AR's. Timings are this
machine's and this run's. What is run comes from an `Inputs` source: `PromptFile` reads prompts; another kind of
input (videos, pictures) joins with its own source, the table stays the same.
"""
from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mmspec.bench import as_entry, environment, run_benchmark
from mmspec.sampling import merged

# the papers' names for mmspec's methods (docs/methods.md)
PAPER_NAMES = {"ar": "AR", "jacobi": "SJD", "coupled": "SCD-MC", "gumbel": "SCD-GS", "pac": "SJD-PAC",
               "exact": "exact (AR's tokens)", "lookup": "lookup", "eagle": "EAGLE", "draft-model": "draft model"}
DEFAULT_TABLE_METHODS = "jacobi,coupled,gumbel,pac,exact"


class Inputs(Protocol):
    """What a table runs: its items and how a pipeline runs one of them."""

    kind: str  # the pipeline kind the inputs are for (image, video...)

    def items(self) -> list: ...

    def describe(self) -> dict: ...

    def run(self, pipeline, item, **call) -> Any:
        """pipeline's output for one item, with the call's method, window, seed and sampling."""
        ...


@dataclass
class PromptFile:
    """Prompts from a text file (one a line, blank lines skipped) or a PartiPrompts-style TSV (a `Prompt` column,
    tab-separated, with a header line); `limit`: the first N."""

    path: Path
    limit: "int | None" = None
    kind: str = "image"
    prompts: list[str] = field(init=False)

    def __post_init__(self):
        self.path = Path(self.path)
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {self.limit}")
        if not self.path.is_file():
            raise FileNotFoundError(f"--prompts: no file at {self.path}")
        text = self.path.read_text(encoding="utf-8")
        if self.path.suffix.lower() == ".tsv":
            rows = list(csv.DictReader(text.splitlines(), delimiter="\t"))
            if not rows or "Prompt" not in rows[0]:
                raise ValueError(f"--prompts {self.path}: a .tsv needs a header with a 'Prompt' column "
                                 "(PartiPrompts' layout)")
            prompts = [r["Prompt"].strip() for r in rows]
        else:
            prompts = [line.strip() for line in text.splitlines()]
        self.prompts = [p for p in prompts if p][: self.limit]
        if not self.prompts:
            raise ValueError(f"--prompts {self.path} holds no prompt")

    def items(self) -> list[str]:
        return self.prompts

    def describe(self) -> dict:
        return {"source": str(self.path), "prompts": len(self.prompts)}

    def run(self, pipeline, item: str, **call):
        return pipeline(item, **call)


def run_table(pipeline, inputs: Inputs, methods: list, *, repeats: int = 1, **call) -> list[dict]:
    """Every method (names, specs or Entries with their windows) against AR on each input in turn -> one row per
    method, AR first, with the set's figures."""
    per_input = []
    for i, item in enumerate(inputs.items()):
        runner = _Runner(inputs, item)
        rows = run_benchmark(runner.bind(pipeline), [item], methods, repeats=repeats, warmup=i == 0, **call)
        per_input.append({r["method"]: r for r in rows})
    ar = [rows["ar"] for rows in per_input]
    return [_total([rows[label] for rows in per_input], ar) for label in per_input[0]]


@dataclass
class _Runner:
    """pipeline(prompts, method=...) as run_benchmark calls it, running one input of a source."""

    inputs: Inputs
    item: Any

    def bind(self, pipeline):
        return lambda _items, **call: self.inputs.run(pipeline, self.item, **call)


def _total(rows: list[dict], ar: list[dict]) -> dict:
    """One method's figures over the set, from its rows and AR's (one per input)."""
    steps, seconds = sum(r["nfe_per_row"] for r in rows), sum(r["seconds"] for r in rows)
    tokens = sum(r["tokens_per_row"] for r in rows)
    first = rows[0]
    return {"method": first["method"], "name": first["name"], "paper_name": PAPER_NAMES.get(first["name"], first["name"]),
            "window": first["window"], "inputs": len(rows), "steps": steps, "seconds": seconds,
            "steps_per_input": steps / len(rows), "seconds_per_input": seconds / len(rows),
            "steps_compression": sum(r["nfe_per_row"] for r in ar) / steps,
            "latency_speedup": sum(r["seconds"] for r in ar) / seconds,
            "mean_acceptance_length": tokens / steps, "tokens_per_second": tokens / seconds,
            "identical_inputs": sum(r["identical_rows"] == r["rows"] for r in rows)}


def format_markdown(result: dict) -> str:
    """The table as SJD-PAC and SCD lay theirs out: one line per method, latency and step acceleration against AR."""
    env = result["environment"]
    lines = [f"# {result['model']}", "",
             f"{result['rows'][0]['inputs']} inputs from {result['inputs']['source']}; sampling "
             f"{json.dumps(result['sampling'])}; device {env['device']}{' (compiled)' if result['compiled'] else ''}; "
             f"batch 1; best of {result['repeats']} run(s) per input; mmspec {env['commit']}.", "",
             "| Method | Window | Latency (s) | Acceleration (latency) | Steps | Acceleration (steps) | "
             "Mean acceptance length | Tokens/s | AR's tokens |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        same = f"{r['identical_inputs']}/{r['inputs']}" if r["name"] in ("ar", "exact") else "-"
        lines.append(f"| {r['paper_name']} (`{r['name']}`) | {r['window']} | {r['seconds_per_input']:.2f} | "
                     f"{r['latency_speedup']:.2f}x | {r['steps_per_input']:.1f} | {r['steps_compression']:.2f}x | "
                     f"{r['mean_acceptance_length']:.2f} | {r['tokens_per_second']:.1f} | {same} |")
    lines += ["", "Latency and steps: per input, averaged over the set; accelerations: AR's total over the method's. "
              "AR's tokens: inputs whose tokens equal AR's with the same seed (`exact` promises all)."]
    return "\n".join(lines) + "\n"


def table(pipeline, inputs: Inputs, methods: list, *, model: str, device: str = "cpu", repeats: int = 1,
          out: "Path | None" = None, **call) -> dict:
    """run_table, with where the figures come from; written as table.json and table.md into `out` when given."""
    entries = [as_entry(m) for m in methods]
    rows = run_table(pipeline, inputs, entries, repeats=repeats, **call)
    sampling = merged(pipeline.default_sampling, call.get("sampling"))  # (what the pipeline runs)
    result = {"model": model, "inputs": inputs.describe(), "sampling": sampling, "repeats": repeats,
              "compiled": bool(getattr(pipeline, "compile", False)), "environment": environment(device),
              "methods": [str(e) for e in entries], "rows": rows}
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.json").write_text(json.dumps(result, indent=2))
        (out / "table.md").write_text(format_markdown(result))
    return result

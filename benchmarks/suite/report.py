"""A suite's results as files: one JSON with everything, and a markdown report of the same figures."""
from __future__ import annotations

import json
from pathlib import Path


def write_json(result: dict, path: str | Path) -> Path:
    path = Path(path)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def sampling_name(sampling: dict) -> str:
    """{'temperature': 0.0} -> 'greedy'; {'temperature': 0.8, 'top_p': 0.95} -> 'temperature 0.8, top_p 0.95'."""
    if sampling.get("temperature", 1.0) == 0:
        return "greedy"
    return ", ".join(f"{k} {v}" for k, v in sampling.items())


def grid_rows(result: dict, sweep: str) -> list[dict]:
    """Every method's figures from the grid cases of one sweep ("rows" or "window"), each with kind and rows."""
    return [{"kind": c["kind"], "rows": c["rows"], **r} for c in result["cases"]
            if c["case"] == "GridCase" and c["sweep"] == sweep for r in c["results"]]


def on_cpu(result: dict) -> bool:
    """CPU time measures a run only when the CPU does the work (GPU kernels run while the CPU waits)."""
    return result["environment"]["device"] == "cpu"


def environment_line(result: dict) -> str:
    """Where and from what the figures come, and how long the suite took."""
    env = result["environment"]
    gpu = f" ({env['gpu']})" if "gpu" in env else ""
    return (f"Device {env['device']}{gpu}; CPU {env['cpu']}, {env['cpu_count']} cores, torch {env['torch']} with "
            f"{env['threads']} thread{'s' * (env['threads'] != 1)}, Python {env['python']}; commit "
            f"{env['commit'] or 'unknown'}. The whole suite took {result['seconds']:.0f} s "
            f"({result['cpu_seconds']:.0f} s of CPU time).")


def markdown(result: dict, suite: str) -> str:
    cases = result["cases"]
    cpu_note = (" CPU-time ratio: the same with this process's CPU time, which a machine shared with other work "
                "disturbs less (with one thread, it is the run's wall-clock time on an idle core).") if on_cpu(result) else ""
    lines = [f"# `python -m benchmarks.suite {suite}`", "", environment_line(result), "",
             (f"Timing: in one process, each case runs `ar` and its methods round-robin; seconds are the best of n "
              f"timed runs (n = {_repeats(cases)}), after one untimed run (of `ar` for image and video, of "
              "every mmspec method for text; a transformers baseline's untimed run also tells whether it accepts "
              "the settings). Wall-clock ratio = `ar` seconds / method seconds: above 1 is faster than `ar`. NFE "
              f"ratio = `ar` forwards / method forwards.{cpu_note} Models at their default sampling; seeds 0, 1, "
              "... per row."), ""]
    lines += _lossless(result)
    pivots = [("wall_ratio", "Wall-clock")] + [("cpu_ratio", "CPU-time")] * on_cpu(result)
    for metric, name in pivots:
        lines += _grid_pivot(grid_rows(result, "rows"), metric, name)
    lines += _grid_table("All figures against batch size", grid_rows(result, "rows"), _label, on_cpu(result))
    lines += _grid_table("Against the window (1 row)", grid_rows(result, "window"), lambda r: r["name"],
                         on_cpu(result))
    lines += _text(cases, on_cpu(result))
    return "\n".join(lines) + "\n"


def _repeats(cases: list[dict]) -> str:
    """'2: 1 row, text; 1: 4 rows, window sweep': how many timed runs each case kept the best of."""
    groups: dict[int, list[str]] = {}
    for c in cases:
        if "repeats" in c:
            what = ("text" if c["case"] == "TextCase" else "window sweep" if c["sweep"] == "window"
                    else f"{c['rows']} row{'s' * (c['rows'] > 1)}")
            groups.setdefault(c["repeats"], []).append(what)
    return "; ".join(f"{n}: {', '.join(dict.fromkeys(w))}" for n, w in sorted(groups.items(), reverse=True))


def _lossless(result: dict) -> list[str]:
    lines = ["## Lossless check", ""]
    for c in result["cases"]:
        if c["case"] == "LosslessCase":
            lines.append(f"- {c['kind']} ({c['rows']} prompts): " + c["line"].replace("\n", "\n  "))
    exact = [r for r in grid_rows(result, "rows") + grid_rows(result, "window") if r["name"] == "exact"]
    for kind in sorted({r["kind"] for r in exact}):
        same = sum(r["identical_rows"] for r in exact if r["kind"] == kind)
        total = sum(r["rows"] for r in exact if r["kind"] == kind)
        loud = "" if same == total else " **MISMATCH: exact must equal ar**"
        lines.append(f"- {kind}, the timed runs: `exact` gave `ar`'s tokens on {same}/{total} rows{loud}")
    return lines + [""]


def _label(r: dict) -> str:
    """A method's label, with the method it runs when the label does not say (auto)."""
    return r["method"] if r["method"].startswith(r["name"]) else f"{r['method']} ({r['name']})"


def _window(r: dict) -> str:
    return f"auto (mean {r['mean_window']:.1f})" if r["window"] == "auto" else str(r["window"])


def _grid_pivot(rows: list[dict], metric: str, name: str) -> list[str]:
    if not rows:
        return []
    counts = sorted({r["rows"] for r in rows})
    lines = [f"## {name} ratio against `ar` (NFE ratio in brackets)", "",
             "| model | method | " + " | ".join(f"{n} row{'s' * (n > 1)}" for n in counts) + " |",
             "|---|---|" + "---|" * len(counts)]
    for kind in sorted({r["kind"] for r in rows}):
        for label in dict.fromkeys(_label(r) for r in rows if r["kind"] == kind and r["name"] != "ar"):
            cells = {r["rows"]: f"{r[metric]:.2f}x ({r['nfe_ratio']:.2f}x)" for r in rows
                     if r["kind"] == kind and _label(r) == label}
            lines.append(f"| {kind} | {label} | " + " | ".join(cells.get(n, "-") for n in counts) + " |")
    return lines + [""]


def _grid_table(title: str, rows: list[dict], label, cpu: bool) -> list[str]:
    if not rows:
        return []
    head = ["model", "rows", "method", "window", "NFE / row", "NFE ratio", "mean acceptance length", "seconds",
            "wall-clock ratio"] + ["CPU seconds", "CPU-time ratio"] * cpu + ["rows identical to ar"]
    lines = [f"## {title}", "", "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in rows:
        cells = [r["kind"], r["rows"], label(r), _window(r), f"{r['nfe_per_row']:.1f}", f"{r['nfe_ratio']:.2f}x",
                 f"{r['mean_acceptance_length']:.2f}", f"{r['seconds']:.2f}", f"{r['wall_ratio']:.2f}x"]
        cells += [f"{r['cpu_seconds']:.2f}", f"{r['cpu_ratio']:.2f}x"] * cpu + [f"{r['identical_rows']}/{r['rows']}"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return lines + [""]


def _text(cases: list[dict], cpu: bool) -> list[str]:
    text = [c for c in cases if c["case"] == "TextCase"]
    if not text:
        return []
    head = ["rows", "sampling", "mmspec", "tok/s", "transformers", "tok/s", "ratio"] + ["CPU-time ratio"] * cpu
    lines = ["## Text against transformers (tokens per second, new tokens only)", "",
             ("rows: the batch size (1: the prompts one after the other; more: one ragged batch). Greedy rows "
              "also say how many rows gave `generate`'s tokens exactly, [same/rows]."), "",
             "| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    notes = []
    for c in text:
        sampling = sampling_name(c["sampling"])
        for p in c["pairs"]:
            ours, theirs = c["results"][f"mmspec {p['mmspec']}"], c["results"][f"transformers {p['transformers']}"]
            best = " (best)" if c["best"] is not None and p["mmspec"] == c["best"]["mmspec"] else ""
            cells = [c["rows"], sampling, f"{p['mmspec']}{best}{_same(ours)}", f"{ours['tokens_per_second']:.0f}",
                     f"{p['transformers']}{_same(theirs)}", f"{theirs['tokens_per_second']:.0f}",
                     f"{p['ratio']:.2f}x"] + [f"{p['cpu_ratio']:.2f}x"] * cpu
            lines.append("| " + " | ".join(map(str, cells)) + " |")
        notes += [f"- {c['rows']} row(s), {sampling}: transformers refused `{b}`: {why}" for b, why in c["refused"].items()]
    baselines = {b: d for c in text for b, d in c["baselines"].items()}
    notes += [f"- `{b}`: {d}" for b, d in baselines.items()]
    return lines + [""] + notes + [""]


def _same(figures: dict) -> str:
    """Greedy cases: ' [k/n]', how many rows gave transformers generate's tokens."""
    same = figures.get("identical_to_generate")
    return "" if same is None else f" [{same['identical']}/{same['rows']}]"

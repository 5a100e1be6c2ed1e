"""What the papers' acceptance would give in mmspec: the steps (NFE) ratio a paper reports on the real weights, times
what a forward of L = 1 costs against one of the paper's L on a measured cost curve (benchmarks/cost_curve.py):

    latency ratio = NFE ratio x c(B, 1) / c(B, L)

at the rows one output takes (2 with CFG). It counts the target's forwards only: drafting and verification are left
out (on the bundled models the engine's step beside its forward is measured in benchmarks/README.md). A curve of the
paper's own family gives that family's projection; any other measured curve gives a stand-in (what a model of that
size would gain at the paper's acceptance), marked as such.

  python -m benchmarks.projection CURVE.json [CURVE.json ...] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.suite.published import PUBLISHED, SCD, Published
from mmspec.synthetic import REAL

# latency ratios the papers report beside their NFE ratios (benchmarks/suite/published.py has the NFE ratios)
PAPER_LATENCY = {("SJD-PAC", "Lumina-mGPT 7B"): 3.80, ("SCD (MC or GS coupling)", "Lumina-mGPT 7B 768²"): 4.21,
                 ("SCD (GS coupling)", "Janus-Pro-7B"): 2.45}
FAMILY = {"Lumina-mGPT": "lumina-mgpt-7b", "Janus-Pro": "janus-pro-7b", "Cosmos-1": "cosmos-1-4b"}
# Janus-Pro at L = 32 (SCD, GS coupling): NFE 576 -> 154, 2.45x latency
POINTS = (*[p for p in PUBLISHED if p.method in ("SJD-PAC", "SCD (MC or GS coupling)", "SCD (GS coupling)")],
          Published("SCD (GS coupling)", "Janus-Pro-7B", "image", 32, 576 / 154, SCD, "NFE 576 -> 154"))


def family_of(point: Published) -> str | None:
    return next((name for key, name in FAMILY.items() if point.model.startswith(key)), None)


def project(curves: list[dict]) -> list[dict]:
    """Every published point against every measured curve that has its window at the rows one output takes."""
    out = []
    for curve in curves:
        env = curve["environment"]
        device = env.get("gpu") or f"{env['device']} ({env['threads']} threads)"
        by = {(r["model"], r["rows"], r["window"]): r for r in curve["rows"]}
        for model in dict.fromkeys(r["model"] for r in curve["rows"]):
            per_output = 2 if REAL[model].cfg else 1
            for point in POINTS:
                one, wide = by.get((model, per_output, 1)), by.get((model, per_output, point.window))
                if one is None or wide is None:
                    continue
                for kind in ("eager", "compiled"):
                    if f"{kind}_ms" not in one or f"{kind}_ms" not in wide:
                        continue
                    cost = wide[f"{kind}_ms"] / one[f"{kind}_ms"]
                    out.append({"paper": f"{point.method}, {point.model}", "window": point.window,
                                "nfe_ratio": round(point.ratio, 2),
                                "paper_latency": PAPER_LATENCY.get((point.method, point.model)),
                                "curve": model, "own_family": family_of(point) == model, "device": device,
                                "kind": kind, "rows": per_output, "cost_ratio": round(cost, 2),
                                "projected_latency": round(point.ratio / cost, 2)})
    return out


def table(rows: list[dict]) -> str:
    lines = ["| paper point | L | NFE ratio | paper's latency ratio | cost curve of | device | forward | B | "
             "c(B, L) / c(B, 1) | projected latency ratio |", "|" + "---|" * 10]
    for r in rows:
        curve = r["curve"] if r["own_family"] else f"{r['curve']} (stand-in)"
        lines.append(f"| {r['paper']} | {r['window']} | {r['nfe_ratio']}x | "
                     f"{'' if r['paper_latency'] is None else str(r['paper_latency']) + 'x'} | {curve} | "
                     f"{r['device']} | {r['kind']} | {r['rows']} | {r['cost_ratio']} | **{r['projected_latency']}x** |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("curves", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    text = table(project([json.loads(p.read_text()) for p in a.curves]))
    print(text)
    if a.out:
        a.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

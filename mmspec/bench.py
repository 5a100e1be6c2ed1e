"""Benchmarks: every method against plain AR on the same prompts and seeds, in the same run.

Reports per method: NFE per row and its ratio to AR, mean acceptance length, acceptance rate,
seconds and the wall-clock ratio to AR. Timings come from this machine and this run only.
"""
from __future__ import annotations

import platform
import time

import torch


def run_benchmark(pipeline, prompts: list, methods: list, *, repeats: int = 1, **call) -> list[dict]:
    """pipeline(prompts, method=m, **call) for 'ar' and each method; -> one row of figures per method."""
    methods = ["ar"] + [m for m in methods if m != "ar"]
    rows = []
    for method in methods:
        seconds, out = [], None
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = pipeline(prompts, method=method, **call)
            seconds.append(time.perf_counter() - t0)
        s = out.stats
        rows.append({"method": method if isinstance(method, str) else method.get("name"),
                     "nfe_per_row": s.nfe.float().mean().item(), "tokens_per_row": s.committed.float().mean().item(),
                     "mean_acceptance_length": s.mean_acceptance_length, "acceptance_rate": s.acceptance_rate,
                     "seconds": min(seconds)})
    ar = rows[0]
    for row in rows:
        row["nfe_ratio"] = ar["nfe_per_row"] / row["nfe_per_row"]
        row["wall_ratio"] = ar["seconds"] / row["seconds"]
    return rows


def compare(pipeline, prompt, method, **call) -> dict:
    """Run `method`, then plain AR with the same prompt, seed and sampling (the first run pays any warm-up,
    so the speed-up is not flattered). -> {"output": the method's output, its and AR's forwards per row and
    seconds, "speedup", "nfe_ratio", "identical": whether the two produced the same tokens}."""
    out = pipeline(prompt, method=method, **call)
    ar = pipeline(prompt, method="ar", **call)
    tokens = lambda o: [torch.as_tensor(t) for t in o.tokens]  # noqa: E731  (a [B, N] tensor or per-row lists)
    figures = {name: {"nfe_per_row": o.stats.nfe.float().mean().item(), "seconds": o.summary["seconds"]}
               for name, o in (("method", out), ("ar", ar))}
    return {"output": out, **figures,
            "speedup": figures["ar"]["seconds"] / figures["method"]["seconds"],
            "nfe_ratio": figures["ar"]["nfe_per_row"] / figures["method"]["nfe_per_row"],
            "identical": all(torch.equal(a, b) for a, b in zip(tokens(out), tokens(ar)))}


def format_comparison(method: str, c: dict) -> str:
    m, a = c["method"], c["ar"]
    same = "identical tokens" if c["identical"] else "different tokens (a lossless method keeps the law, not the draws)"
    if method == "exact":
        same = "identical tokens, as exact promises" if c["identical"] else "DIFFERENT tokens: exact must equal ar"
    return (f"{method}: {m['nfe_per_row']:.0f} forwards, {m['seconds']:.2f} s | ar: {a['nfe_per_row']:.0f} forwards, "
            f"{a['seconds']:.2f} s | speed-up {c['speedup']:.2f}x wall-clock, {c['nfe_ratio']:.2f}x fewer forwards | "
            f"{same}")


def environment() -> dict:
    return {"torch": torch.__version__, "device": "cuda" if torch.cuda.is_available() else "cpu",
            "threads": torch.get_num_threads(), "machine": platform.machine(), "python": platform.python_version()}


def format_table(rows: list[dict]) -> str:
    head = f"{'method':<12}{'NFE/row':>9}{'NFE ratio':>11}{'mean acc len':>14}{'acc rate':>10}{'seconds':>9}{'wall ratio':>12}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['method']:<12}{r['nfe_per_row']:>9.1f}{r['nfe_ratio']:>10.2f}x{r['mean_acceptance_length']:>14.2f}"
                     f"{r['acceptance_rate']:>10.3f}{r['seconds']:>9.2f}{r['wall_ratio']:>11.2f}x")
    return "\n".join(lines)

"""Benchmarks: every method against plain AR on the same prompts and seeds, in the same run.

Reports per method: NFE per row and its ratio to AR, mean acceptance length, acceptance rate, seconds
(wall-clock and this process's CPU time) and their ratios to AR. Runs alternate round-robin after an
untimed AR run, and the best of the repeats is kept. Timings come from this machine and this run only.
The lossless check printed beside these figures is in mmspec.lossless; whole suites in benchmarks/suite (a clone's).
Pipelines for a benchmark come from mmspec.pipelines.load_pipeline(..., window_cache="off"): auto windows learn
within the process only, so a benchmark measures what a first call gets, whatever earlier processes measured.
"""
from __future__ import annotations

import math
import os
import platform
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mmspec.methods import Method

PROMPTS = {"image": ["red heart", "pizza", "rocket", "dog face"],
           "video": ["bounce red apple", "slide right car", "zoom in red heart", "rotate sun"],
           "text": ["def fibonacci(n):\n", "import os\n\n\ndef ", "class Stack:\n    def "]}


@dataclass(frozen=True)
class Entry:
    """One benchmarked configuration: a method (a name or {'name': ..., options}) at a window."""

    method: str | dict | Method
    window: int | str | None = None  # None: the call's window (the pipeline's default when the call has none)
    label: str = ""  # default: the method's name, followed by the window when one is set here

    @property
    def name(self) -> str:
        """The method's name, whether given as a name, a {'name': ...} dict or a Method."""
        m = self.method
        return m if isinstance(m, str) else m["name"] if isinstance(m, dict) else m.name

    def __str__(self) -> str:
        return self.label or (self.name if self.window is None else f"{self.name} w={self.window}")

    def call(self, call: dict) -> dict:
        """The pipeline call's keyword arguments with this entry's window."""
        return call if self.window is None else {**call, "window": self.window}


def as_entry(method) -> Entry:
    return method if isinstance(method, Entry) else Entry(method)


def sync() -> None:
    """Wait for queued device work, so that a timer sees it (CUDA kernels run asynchronously)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@dataclass
class Timed:
    seconds: float  # the best wall-clock time of the repeats
    # the best CPU time of this process (all its threads): on a CPU shared with other work, what a run costs when
    # it has its cores to itself (with one thread, its wall-clock time on an idle core); meaningless for GPU work
    cpu_seconds: float
    result: Any  # what the last run returned


def time_runs(runs: dict[str, Callable[[], Any]], repeats: int = 1, warmup: Iterable[str] = ()) -> dict[str, Timed]:
    """Time each run `repeats` times, round-robin (the first of each, then the second of each...) so that
    machine noise falls on all of them alike; the runs named in `warmup` first run once untimed (one-off
    allocations, caches)."""
    for name in warmup:
        runs[name]()
    timed = {name: Timed(math.inf, math.inf, None) for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            sync()
            t0, cpu0 = time.perf_counter(), time.process_time()
            result = run()
            sync()
            t = timed[name]
            t.seconds, t.result = min(t.seconds, time.perf_counter() - t0), result
            t.cpu_seconds = min(t.cpu_seconds, time.process_time() - cpu0)
    return timed


def row_tokens(out) -> list[torch.Tensor]:
    """A pipeline output's tokens, one tensor per row ([B, N] for grids, ragged per-row lists for text)."""
    return [torch.as_tensor(t).cpu() for t in out.tokens]


def identical_rows(a, b) -> int:
    """How many rows of two outputs have the same tokens (and the same length)."""
    return sum(torch.equal(x, y) for x, y in zip(row_tokens(a), row_tokens(b)))


def run_figures(timed: Timed) -> dict:
    """NFE, acceptance and speed of one timed pipeline output."""
    s = timed.result.stats
    return {"nfe_per_row": s.nfe.float().mean().item(), "tokens_per_row": s.committed.float().mean().item(),
            "total_nfe": s.total_nfe,  # the batch's forwards: it steps until its last row ends (what a step's cost pays)
            "mean_window": s.mean_window,
            "mean_acceptance_length": s.mean_acceptance_length, "acceptance_rate": s.acceptance_rate,
            "seconds": timed.seconds, "cpu_seconds": timed.cpu_seconds,
            "tokens_per_second": s.committed.sum().item() / timed.seconds}


def run_benchmark(pipeline, prompts: list, methods: list, *, repeats: int = 1, warmup: bool = True,
                  **call) -> list[dict]:
    """pipeline(prompts, method=m, **call) for 'ar' and each method (a name, {'name': ..., options} or an
    Entry with its own window), round-robin, best of `repeats`; warmup: one untimed AR run first.
    -> one row of figures per method, AR first, each with "output": its last output (not JSON)."""
    entries = [Entry("ar")] + [e for e in map(as_entry, methods) if e.name != "ar"]
    if len({str(e) for e in entries}) < len(entries):
        raise ValueError(f"benchmark entries need distinct labels, got {[str(e) for e in entries]}")
    runs = {str(e): (lambda e=e: pipeline(prompts, method=e.method, **e.call(call))) for e in entries}
    timed = time_runs(runs, repeats, warmup=["ar"] if warmup else [])
    rows = []
    for e in entries:
        out = timed[str(e)].result
        window = e.call(call).get("window")
        rows.append({"method": str(e), "name": e.name, "window": "auto" if window == "auto" else out.stats.window,
                     **run_figures(timed[str(e)]), "identical_rows": identical_rows(out, timed["ar"].result),
                     "rows": len(row_tokens(out)), "output": out})
    ar = rows[0]
    for row in rows:
        row["nfe_ratio"] = ar["nfe_per_row"] / row["nfe_per_row"]
        row["wall_ratio"] = ar["seconds"] / row["seconds"]
        row["cpu_ratio"] = ar["cpu_seconds"] / row["cpu_seconds"]
    return rows


def compare(run: Callable[[Any], Any], method) -> dict:
    """run(method) -> a pipeline output: runs `method`, then plain AR (the caller's run keeps the prompt, seed and
    sampling; the first run pays any warm-up, so the speed-up is not flattered). -> {"output": the method's output,
    "ar_output": AR's, "method" and "ar": forwards per row and seconds of each, "speedup", "nfe_ratio",
    "identical": whether the two produced the same tokens}. What `mmspec generate --compare` and the demo show."""
    out = run(method)
    ar = run("ar")
    figures = {name: {"nfe_per_row": o.stats.nfe.float().mean().item(), "seconds": o.summary["seconds"]}
               for name, o in (("method", out), ("ar", ar))}
    return {"output": out, "ar_output": ar, **figures,
            "speedup": figures["ar"]["seconds"] / figures["method"]["seconds"],
            "nfe_ratio": figures["ar"]["nfe_per_row"] / figures["method"]["nfe_per_row"],
            "identical": identical_rows(out, ar) == len(row_tokens(ar))}


def format_comparison(method: str, c: dict) -> str:
    m, a = c["method"], c["ar"]
    same = "identical tokens" if c["identical"] else "different tokens (a lossless method keeps the law, not the draws)"
    if method == "exact":
        same = "identical tokens, as exact promises" if c["identical"] else "DIFFERENT tokens: exact must equal ar"
    return (f"{method}: {m['nfe_per_row']:.0f} forwards, {m['seconds']:.2f} s | ar: {a['nfe_per_row']:.0f} forwards, "
            f"{a['seconds']:.2f} s | speed-up {c['speedup']:.2f}x wall-clock, {c['nfe_ratio']:.2f}x fewer forwards | "
            f"{same}")


def environment(device: str | torch.device = "cpu") -> dict:
    """Where the figures come from: versions, the device, CPU threads and model, the source commit."""
    device = torch.device(device)
    env = {"torch": torch.__version__, "device": str(device), "threads": torch.get_num_threads(),
           "cpu_count": os.cpu_count(), "cpu": _cpu_model(), "machine": platform.machine(),
           "python": platform.python_version(), "commit": _git_commit()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    return env


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _git_commit() -> str | None:
    """The commit of the mmspec source this runs from (with '-dirty' for uncommitted changes), if a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("-dirty" if dirty else "")


def format_table(rows: list[dict]) -> str:
    head = (f"{'method':<14}{'window':>7}{'NFE/row':>9}{'NFE ratio':>11}{'mean acc len':>14}{'acc rate':>10}"
            f"{'seconds':>9}{'wall ratio':>12}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['method']:<14}{r['window']:>7}{r['nfe_per_row']:>9.1f}{r['nfe_ratio']:>10.2f}x"
                     f"{r['mean_acceptance_length']:>14.2f}{r['acceptance_rate']:>10.3f}{r['seconds']:>9.2f}"
                     f"{r['wall_ratio']:>11.2f}x")
    return "\n".join(lines)

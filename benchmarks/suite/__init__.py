"""Benchmark suites (`python -m benchmarks.suite NAME [KIND] [options]`, from a clone): cases as data (cases.py), one runner per kind of
case (run.py; counts.py for the acceptance suite's forward counts, with measure.py's measuring verifier), the
transformers baselines (hf.py), and the files they leave: JSON and markdown (report.py, acceptance_report.py),
PNG plots (plots.py, acceptance_plots.py); published.py holds the published points they are set against.

SUITES is the registry `python -m benchmarks.suite` reads: a suite is its cases and the report and plots it writes;
one more suite is one more entry. The package never imports this folder (a wheel has none): __main__.py hands this
module, with the overhead check (benchmarks/overhead.py), to mmspec.cli's `bench --suite`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from benchmarks import overhead
from benchmarks.suite import acceptance_plots, acceptance_report, cases, plots, report
from benchmarks.suite.report import write_json
from benchmarks.suite.run import run_suite

__all__ = ["SUITES", "Suite", "overhead", "run_suite", "save", "write_json"]


@dataclass(frozen=True)
class Suite:
    cases: Callable[..., list]  # (kinds=, draft=, rows= where the suite takes it) -> the cases run_suite runs
    markdown: Callable[[dict, str], str]  # (result, suite name) -> results.md
    write_plots: Callable[[dict, Path], list[Path]]  # (result, folder) -> the PNGs written
    timed: bool = True  # False: counts forwards only (no --rows, no --repeats)


SUITES = {"quick": Suite(cases.quick, report.markdown, plots.write_plots),
          "acceptance": Suite(cases.acceptance, acceptance_report.markdown, acceptance_plots.write_plots, timed=False)}


def save(result: dict, folder: str | Path, suite: str) -> list[Path]:
    """results.json, results.md and the plots of a suite's result, into `folder`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.md").write_text(SUITES[suite].markdown(result, suite))
    return [report.write_json(result, folder / "results.json"), folder / "results.md",
            *SUITES[suite].write_plots(result, folder)]

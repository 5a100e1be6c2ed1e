"""Benchmark suites (`mmspec bench --suite quick`): cases as data (cases.py), one runner per kind of case
(run.py), the transformers baselines (hf.py), and the files they leave: JSON and markdown (report.py), PNG
plots (plots.py)."""
from __future__ import annotations

from pathlib import Path

from mmspec.suite.cases import SUITES
from mmspec.suite.run import run_suite

__all__ = ["SUITES", "run_suite", "save"]


def save(result: dict, folder: str | Path, suite: str) -> list[Path]:
    """results.json, results.md and the plots, into `folder`."""
    from mmspec.suite.plots import write_plots
    from mmspec.suite.report import markdown, write_json

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.md").write_text(markdown(result, suite))
    return [write_json(result, folder / "results.json"), folder / "results.md", *write_plots(result, folder)]

"""Benchmark suites (`mmspec bench --suite quick|acceptance`): cases as data (cases.py), one runner per kind of
case (run.py; counts.py for the acceptance suite's forward counts, with measure.py's measuring verifier), the
transformers baselines (hf.py), and the files they leave: JSON and markdown (report.py, acceptance_report.py),
PNG plots (plots.py, acceptance_plots.py); published.py holds the published points they are set against."""
from __future__ import annotations

from pathlib import Path

from mmspec.suite.cases import SUITES
from mmspec.suite.run import run_suite

__all__ = ["SUITES", "run_suite", "save"]


def save(result: dict, folder: str | Path, suite: str) -> list[Path]:
    """results.json, results.md and the plots, into `folder`: the acceptance suite's own report and plots, the
    quick suite's for any other."""
    from mmspec.suite import acceptance_plots, acceptance_report, plots, report

    markdown, write_plots = ((acceptance_report.markdown, acceptance_plots.write_plots) if suite == "acceptance"
                             else (report.markdown, plots.write_plots))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.md").write_text(markdown(result, suite))
    return [report.write_json(result, folder / "results.json"), folder / "results.md", *write_plots(result, folder)]

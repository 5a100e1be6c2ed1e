"""Timing and figures of mmspec.bench: round-robin best-of timing, windows per entry, rows identical to AR."""
import subprocess
import sys
from pathlib import Path

import pytest

import mmspec
from mmspec.bench import Entry, identical_rows, run_benchmark, time_runs


def test_time_runs_is_round_robin_after_the_warmup_and_keeps_the_best():
    calls = []
    runs = {name: (lambda name=name: calls.append(name) or len(calls)) for name in ("ar", "coupled")}
    timed = time_runs(runs, repeats=3, warmup=["ar"])
    assert calls == ["ar"] + ["ar", "coupled"] * 3
    assert timed["coupled"].result == 7
    assert all(0 <= t.seconds < 1 and 0 <= t.cpu_seconds < 1 for t in timed.values())


@pytest.fixture(scope="module")
def image(tiny_models):
    return mmspec.ImagePipeline.from_pretrained(tiny_models / "image")


def test_entries_run_at_their_own_window_and_exact_gives_ar_tokens(image):
    rows = run_benchmark(image, ["red heart", "apple"], ["coupled", Entry("exact", 3), Entry("coupled", "auto", "auto")],
                         num_outputs=2, seed=5, window=6)
    by = {r["method"]: r for r in rows}
    assert list(by) == ["ar", "coupled", "exact w=3", "auto"]
    assert [by[m]["window"] for m in by] == [1, 6, 3, "auto"]
    assert by["coupled"]["mean_window"] == 6 and by["ar"]["mean_window"] == 1 and 1 <= by["auto"]["mean_window"] <= 6
    assert by["exact w=3"]["identical_rows"] == by["exact w=3"]["rows"] == 4  # exact: AR's tokens, row for row
    assert by["ar"]["nfe_ratio"] == by["ar"]["wall_ratio"] == 1.0 and by["ar"]["nfe_per_row"] == 16
    assert identical_rows(by["coupled"]["output"], by["ar"]["output"]) == by["coupled"]["identical_rows"]
    # the batch steps until its last row ends: its forwards are its slowest row's, not the rows' mean
    nfe = by["coupled"]["output"].stats.nfe
    assert by["coupled"]["total_nfe"] == nfe.max() >= by["coupled"]["nfe_per_row"] and by["ar"]["total_nfe"] == 16


def test_entries_need_distinct_labels(image):
    with pytest.raises(ValueError, match="distinct labels"):
        run_benchmark(image, ["red heart"], [Entry("exact", 3), Entry("exact", 3)])


def test_the_library_loads_no_benchmark_code_and_names_no_file_outside_the_repository():
    root = Path(__file__).parents[1]
    loaded = subprocess.run([sys.executable, "-c", "import sys, mmspec, mmspec.pipelines; print(*sys.modules)"],
                            capture_output=True, text=True, check=True, cwd=root).stdout.split()
    assert not [m for m in loaded if m.startswith(("benchmarks", "mmspec.bench", "mmspec.lossless", "mmspec.suite"))]
    assert not (root / "mmspec" / "suite").exists()
    assert not [str(p) for p in (root / "mmspec").rglob("*.py") if "shared/" in p.read_text()]

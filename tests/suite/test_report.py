import copy
import json

from benchmarks.suite import save
from benchmarks.suite.report import markdown


def test_save_writes_json_markdown_and_plots(tiny_suite, tmp_path):
    result = tiny_suite[0]
    paths = save(result, tmp_path / "out", "quick")
    assert [p.name for p in paths] == ["results.json", "results.md", "batch.png", "window.png"]
    assert json.loads(paths[0].read_text())["cases"][0]["results"][0]["method"] == "ar"
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths[2:])
    text = paths[1].read_text()
    for heading in ("## Lossless check", "## Wall-clock ratio against `ar`", "## Against the window (1 row)",
                    "## Text against transformers"):
        assert heading in text
    assert "| image | auto (exact) |" in text and "transformers refused `assisted`" in text
    assert "video, the timed runs: `exact` gave `ar`'s tokens on 2/2 rows" in text  # w=4 and w=8


def test_a_mismatch_is_loud_in_the_report(tiny_suite):
    result = copy.deepcopy(tiny_suite[0])
    lossless = next(c for c in result["cases"] if c["case"] == "LosslessCase")
    lossless["line"] = "LOSSLESS CHECK FAILED: ..."
    exact = next(r for c in result["cases"] if c["case"] == "GridCase" for r in c["results"] if r["name"] == "exact")
    exact["identical_rows"] = 0
    text = markdown(result, "quick")
    assert "LOSSLESS CHECK FAILED" in text and "**MISMATCH: exact must equal ar**" in text


def test_cpu_time_is_reported_for_cpu_runs_only(tiny_suite):
    result = copy.deepcopy(tiny_suite[0])
    assert "## CPU-time ratio against `ar`" in markdown(result, "quick")
    result["environment"]["device"] = "cuda"  # GPU kernels run while the CPU waits: its time says nothing
    text = markdown(result, "quick")
    assert "CPU-time" not in text and "## Wall-clock ratio against `ar`" in text

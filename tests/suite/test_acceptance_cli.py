"""`python -m benchmarks.suite acceptance`: one kind on a tiny model, and the options it refuses."""
import json

import pytest

from benchmarks.suite.__main__ import main


def test_bench_acceptance_one_kind_writes_its_folder(tiny_models, tmp_path, capsys):
    out = tmp_path / "acceptance"
    assert main(["acceptance", "image", "--model", str(tiny_models / "image"), "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {"results.json", "results.md", "nfe_window.png", "acceptance_slot.png",
                                               "diagnosis.png"}
    result = json.loads((out / "results.json").read_text())
    # the batch, the 1-row runs, the 1-row runs at temperature 1
    assert result["suite"] == "acceptance" and [c["kind"] for c in result["cases"]] == ["image", "image", "image"]
    assert "## NFE ratio against the window (8 rows)" in (out / "results.md").read_text()
    assert "## At temperature 1, no top-k (1-row runs)" in (out / "results.md").read_text()
    assert "suite acceptance:" in capsys.readouterr().out


@pytest.mark.parametrize("flag", [["--rows", "1,8"], ["--repeats", "2"]])
def test_bench_acceptance_refuses_timing_options(flag, capsys):
    assert main(["acceptance", *flag]) == 2
    assert "not for --suite acceptance" in capsys.readouterr().err

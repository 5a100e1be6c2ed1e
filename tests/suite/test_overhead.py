"""The overhead suite splits a step into its parts and sets it beside a plain forward of the same model."""
from benchmarks.suite.__main__ import main


def test_the_overhead_suite_splits_each_step_and_times_a_plain_forward(tiny_models, tmp_path, capsys):
    out = tmp_path / "overhead"
    assert main(["overhead", "image", "--model", str(tiny_models / "image"), "--rows", "1", "--repeats", "1",
                 "--out", str(out)]) in (0, None)
    table = (out / "overhead.md").read_text()
    assert "| step | forward | p | drafting | verification | commit | rest |" in table
    rows = [line for line in table.splitlines() if line.startswith("| image |")]
    assert [r.split(" | ")[2] for r in rows] == ["ar", "exact"]  # one row per method, at 1 row
    for r in rows:
        step, forward, *_ = (float(x) for x in r.split(" | ")[5:12])
        assert 0 < forward <= step  # the forward is a part of the step, not all of it

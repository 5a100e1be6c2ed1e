from types import SimpleNamespace

from mmspec.demo.report import run_stats


def test_the_stats_show_a_long_prompt_short():
    out = SimpleNamespace(summary={"rows": 1, "nfe": 3}, prompts=["pizza " * 20000])
    stats = run_stats(out, "exact")
    assert stats["prompt"].endswith("(119800 more characters)") and len(stats["prompt"]) < 250
    assert stats["outputs"] == 1 and stats["nfe"] == 3

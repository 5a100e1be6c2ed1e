"""benchmarks/arms.py: methods against `ar` in one process, `auto` cold, on a tiny model."""
from benchmarks.arms import run


def test_arms_time_each_method_against_ar_and_exact_gives_ars_tokens(tiny_models):
    result = run("image", 2, [("ar", 1), ("exact", 4), ("exact", "auto"), ("jacobi", 4)], rounds=2,
                 model=tiny_models / "image", prompts=["red heart", "bounce apple"])
    assert list(result) == ["ar:1", "exact:4", "exact:auto", "jacobi:4"]
    assert result["ar:1"]["least_ratio"] == 1.0 and result["ar:1"]["forwards_per_row"] == 16
    assert result["exact:4"]["same_tokens_as_first"] and result["exact:auto"]["same_tokens_as_first"]
    assert result["exact:4"]["forwards_per_row"] < 16  # drafts were accepted
    for figures in result.values():
        assert 0 < figures["least_s"] <= figures["median_s"]


def test_arms_time_a_video_whole_with_its_first_frame(tiny_models):
    result = run("video", 1, [("ar", 1), ("exact", 4)], rounds=1, first_frame=True,
                 model=tiny_models / "video-from-text", prompts=["bounce apple"])
    assert result["exact:4"]["same_tokens_as_first"] and result["exact:4"]["forwards_per_row"] < 12

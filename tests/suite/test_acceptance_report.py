"""The acceptance suite's report and plots, from the tiny suite's figures."""
import copy
import json

from benchmarks.suite import save
from benchmarks.suite.acceptance_report import group_mean, markdown, slot_groups
from benchmarks.suite.cases import HOT
from benchmarks.suite.published import PUBLISHED


def test_save_writes_json_markdown_and_three_plots(tiny_acceptance, tmp_path):
    paths = save(tiny_acceptance[0], tmp_path / "out", "acceptance")
    assert [p.name for p in paths] == ["results.json", "results.md", "nfe_window.png", "acceptance_slot.png",
                                       "diagnosis.png"]
    assert json.loads(paths[0].read_text())["cases"][0]["case"] == "CountCase"
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths[2:])


def test_the_report_has_every_section_and_the_published_points(tiny_acceptance):
    text = markdown(tiny_acceptance[0])
    for heading in ("## NFE ratio against the window (4 rows)", "## Mean acceptance length against the window",
                    "## At the default window: the 4-row batch and the 1-row runs",
                    "## Acceptance per window slot", "## Why: TV between successive Jacobi iterations",
                    "## The issue's targets", "## Published reference points"):
        assert heading in text
    assert all(f"| {p.method} | {p.model} | {p.kind} | {p.window} | {p.ratio:.2f}x |" in text for p in PUBLISHED)
    assert "| image | coupled(init=above) |" in text
    video = next(line for line in text.splitlines() if line.startswith("| video | coupled |"))
    # frame 0 is taken with the first generated token in one forward, by `ar` too: both counts agree
    assert "x (" not in video and "given tokens alone" not in text
    assert "one batch of 4 rows (2 prompts x 2 samples" in text
    assert "- image `coupled` w=16: the slot-0 draft is accepted in" in text
    assert "These sweeps stop early" not in text  # every tiny sweep runs to its widest
    result = copy.deepcopy(tiny_acceptance[0])
    video = next(c for c in result["cases"] if c["kind"] == "video" and not c["one_row"])
    video["results"] = [r for r in video["results"] if r["label"] != "lookup w=64"]
    assert "wider windows gain little, to save time (benchmarks/README.md): video `lookup` at w=4." in markdown(result)


def test_targets_say_met_or_not_met(tiny_acceptance):
    result = copy.deepcopy(tiny_acceptance[0])
    assert "| image NFE ratio (any method) | 4.5 |" in markdown(result) and "**not met**" in markdown(result)
    rows = next(c for c in result["cases"] if c["kind"] == "image" and not c["one_row"])["results"]
    next(r for r in rows if r["label"] == "coupled w=4")["generated_nfe_ratio"] = 5.0
    assert "| image NFE ratio (any method) | 4.5 | 5.00 (coupled w=4) | met |" in markdown(result)


def test_slot_groups_and_weighted_means():
    assert [g for g, _ in slot_groups(63)] == ["0", "1", "2", "3", "4-7", "8-15", "16-31", "32-62"]
    assert [g for g, _ in slot_groups(5)] == ["0", "1", "2", "3", "4"]
    assert group_mean([0.5, None, 1.0], range(3), [1, 9, 3]) == (0.5 + 3.0) / 4
    assert group_mean([None], range(1)) is None


def test_the_draft_model_line_derives_its_ceiling_from_the_measured_tv(tiny_acceptance):
    result = copy.deepcopy(tiny_acceptance[0])
    draft = next(r for c in result["cases"] if c["kind"] == "text" and not c["one_row"] for r in c["results"]
                 if r["label"] == "draft-model w=6")
    draft["diagnosis"]["mean_tv"] = 0.3
    assert "so a draft is accepted with a = 0.70;" in markdown(result)
    assert "(1 - a^L)/(1 - a) = 2.94 tokens per forward at L = 6" in markdown(result)
    assert "at most 1/(1 - a) = 3.33 at any window" in markdown(result)


def test_the_report_says_slot_0_limits_acceptance_only_when_its_tv_is_the_highest(tiny_acceptance):
    result = copy.deepcopy(tiny_acceptance[0])
    coupled = next(r for c in result["cases"] if c["kind"] == "image" and not c["one_row"] for r in c["results"]
                   if r["label"] == "coupled w=16")["diagnosis"]
    line = lambda: next(x for x in markdown(result).splitlines() if x.startswith("- image `coupled` w=16"))  # noqa: E731
    coupled["tv"] = [0.9] + [0.2] * (len(coupled["tv"]) - 1)
    assert "it is what limits acceptance" in line()
    coupled["tv"] = [0.1] + [0.2] * (len(coupled["tv"]) - 1)
    assert "limits" not in line()


def test_temperature_1_runs_add_one_section_and_leave_the_others_as_they_were(tiny_acceptance):
    result = tiny_acceptance[0]
    before, section = markdown(result).split("## At temperature 1, no top-k (1-row runs)")
    section, after = section.split("## Published reference points")
    without = copy.deepcopy(result)
    without["cases"] = [c for c in without["cases"] if c["sampling"] != HOT]
    assert before + "## Published reference points" + after == markdown(without)
    assert "(its CFG kept): image: temperature 1.0, cfg_scale 2.0." in section
    assert "Entropy of p under `ar`, at temperature 1 / at the default: image " in section
    eagle = next(x for x in section.splitlines() if x.startswith("| image | eagle(exact=True, jacobi=1) | 16 |"))
    assert eagle.endswith("| 2/2 |") and eagle.count(" / ") == 3  # each figure beside the default sampling's


def test_the_temperature_1_sentence_says_who_gains_and_where_a_head_does_not_pay(tiny_acceptance):
    result = copy.deepcopy(tiny_acceptance[0])
    default, hot = (next(c for c in result["cases"] if c["kind"] == "image" and c["one_row"]
                         and (c["sampling"] == HOT) == h) for h in (False, True))
    for case, ratios in ((default, (2.5, 2.1, 1.0, 2.0)), (hot, (3.0, 2.0, 1.01, 5.0))):
        for r, x in zip(case["results"][1:], ratios):  # coupled, exact, lookup, eagle(exact=True, jacobi=1)
            r["generated_nfe_ratio"] = x
    line = next(x for x in markdown(result).splitlines() if x.startswith("- image, NFE ratio from the default"))
    assert ("gain `eagle(exact=True, jacobi=1)` 2.00x -> 5.00x, `coupled` 2.50x -> 3.00x; "
            "within 2%: `lookup` 1.00x -> 1.01x; lose `exact` 2.10x -> 2.00x.") in line
    assert ("at temperature 1 5.00x against 3.00x for `coupled`, the best without a head: it pays (plain `exact` "
            "2.00x); at the default sampling 2.00x against 2.50x for `coupled`, the best without a head: **it does not "
            "pay** (plain `exact` 2.10x).") in line
    for case in (default, hot):
        case["results"] = [r for r in case["results"] if r["name"] != "eagle"]
    assert "No head ran on this model." in markdown(result)

"""A small suite on the tiny models: every kind of case runs and reports what it measured."""
from benchmarks.suite.run import prompts_for


def test_grid_cases_report_each_entry_against_ar(tiny_suite):
    result, lines = tiny_suite
    grids = [c for c in result["cases"] if c["case"] == "GridCase"]
    assert [(c["kind"], c["rows"], c["sweep"]) for c in grids] == [("image", 1, "rows"), ("image", 2, "rows"),
                                                                    ("video", 1, "window")]
    image = grids[1]["results"]
    assert [r["method"] for r in image] == ["ar", "exact", "auto"] and image[2]["name"] == "exact"
    assert image[1]["identical_rows"] == image[1]["rows"] == 2 and image[2]["window"] == "auto"
    # a fixed entry runs at the pipeline's default window at every step, not at "auto" (the pipelines' default)
    assert image[1]["window"] == image[1]["mean_window"] == 16
    assert all(r["seconds"] > 0 and r["wall_ratio"] > 0 and "output" not in r for c in grids for r in c["results"])
    assert [r["window"] for r in grids[2]["results"]] == [1, 4, 4, 8, 8]
    assert len(lines) == len(result["cases"]) + 1 and lines[0].startswith("[1/6] image 1 row(s), rows sweep")


def test_lossless_case_checks_exact_and_greedy_agreement(tiny_suite):
    check = next(c for c in tiny_suite[0]["cases"] if c["case"] == "LosslessCase")
    assert check["check"]["ok"] and check["check"]["exact_equals_ar"] == {"identical": 2, "rows": 2, "ties": []}
    assert set(check["check"]["greedy"]) == {"coupled", "exact", "auto"}
    assert check["line"] == "exact == ar token for token: yes (2/2 rows); greedy agreement with ar: 3/3 methods"


def test_text_cases_time_mmspec_and_transformers_on_the_same_prompts(tiny_suite):
    greedy, sampled = (c for c in tiny_suite[0]["cases"] if c["case"] == "TextCase")
    assert set(greedy["results"]) == {"mmspec ar", "mmspec lookup", "transformers generate", "transformers prompt-lookup"}
    # greedy: mmspec and transformers produce the same tokens, so the tokens per second compare the same work
    assert all(r["identical_to_generate"] == {"identical": 2, "rows": 2} for r in greedy["results"].values())
    assert all(r["tokens"] == 10 and r["tokens_per_second"] > 0 for r in greedy["results"].values())
    assert [(p["mmspec"], p["transformers"]) for p in greedy["pairs"]] == [("ar", "generate"), ("lookup", "prompt-lookup")]
    assert "batch_size = 1" in sampled["refused"]["assisted"]  # transformers' assisted generation cannot batch
    assert {p["transformers"] for p in sampled["pairs"]} == {"generate"} and sampled["best"]["mmspec"] in ("ar", "draft-model")


def test_environment_and_settings_are_recorded(tiny_suite):
    result = tiny_suite[0]
    assert {"torch", "device", "threads", "cpu", "commit"} <= set(result["environment"])
    assert result["settings"]["default_windows"] == {"image": 16, "video": 64, "text": 8}
    assert result["settings"]["draft"].endswith("draft")


def test_rows_beyond_the_prompt_set_reuse_it():
    assert prompts_for("image", 6)[4:] == prompts_for("image", 2)

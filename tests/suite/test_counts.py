"""The acceptance suite's runner on the tiny models: forward counts against `ar`, the given frame, 1-row runs."""


def _case(result, kind, one_row=False, hot=False):
    return next(c for c in result["cases"] if c["case"] == "CountCase" and c["kind"] == kind and c["one_row"] == one_row
                and c.get("over_default", False) == hot)


def _results(result, kind, one_row=False, hot=False):
    return {r["label"]: r for r in _case(result, kind, one_row, hot)["results"]}


def test_ar_walks_every_position_and_the_ratios_are_against_it(tiny_acceptance):
    result, lines = tiny_acceptance
    image = _results(result, "image")
    ar = image["ar"]
    assert ar["nfe_per_row"] == ar["generated_forwards_per_row"] == 16 and ar["nfe_ratio"] == 1.0
    assert ar["diagnosis"]["mean_entropy"] > 0 and "tv" not in ar["diagnosis"]
    for r in image.values():
        assert r["nfe_ratio"] == 16 / r["nfe_per_row"] == r["generated_nfe_ratio"]  # nothing given in an image
        assert r["batch_nfe_ratio"] == 16 / r["batch_forwards"] and r["rows"] == 4
    assert image["coupled(init=above) w=4"]["method"] == "coupled(init=above)"  # a method spec given as a dict
    assert lines[0].startswith("[1/5] image 4 row(s), forward counts: ")
    assert lines[1].startswith("[2/5] image 2 row(s), forward counts, one row at a time: ")
    assert lines[4].startswith("[5/5] image 2 row(s), forward counts, one row at a time, temperature 1.0, top_k None, "
                               "top_p None over the model's default: ")


def test_a_given_video_frame_costs_no_forward_of_its_own(tiny_acceptance):
    video = _results(tiny_acceptance[0], "video")
    ar, narrow = video["ar"], video["coupled w=4"]
    # frame 0 (4 given tokens of 12) is taken with the first generated token in one forward, by ar too
    assert ar["nfe_per_row"] == ar["generated_forwards_per_row"] == 8
    assert narrow["generated_forwards_per_row"] == narrow["nfe_per_row"]
    assert narrow["generated_nfe_ratio"] == 8 / narrow["nfe_per_row"] == narrow["nfe_ratio"]
    assert narrow["generated_tokens_per_row"] == 8 and 0 < narrow["single_share"] <= 1


def test_exact_gives_ars_tokens_through_the_measuring_verifier(tiny_acceptance):
    result = tiny_acceptance[0]
    for kind, one_row, hot in (("image", False, False), ("image", True, False), ("video", False, False),
                               ("image", True, True)):
        exact = [r for r in _results(result, kind, one_row, hot).values() if r["label"].startswith(("exact", "eagle"))]
        assert exact and all(r["identical_to_ar"] == r["rows"] for r in exact)


def test_one_row_runs_pool_single_rows(tiny_acceptance):
    single = _results(tiny_acceptance[0], "image", one_row=True)
    assert set(single) == {"ar", "coupled w=16", "exact w=16", "lookup w=16", "eagle(exact=True, jacobi=1) w=16"}
    for r in single.values():  # one row per call: the batch's forwards are the row's
        assert r["rows"] == 2 and r["batch_forwards"] == r["nfe_per_row"]


def test_coupled_and_draft_model_measure_tv_lookup_has_none(tiny_acceptance):
    result = tiny_acceptance[0]
    coupled, lookup = _results(result, "image")["coupled w=16"], _results(result, "image")["lookup w=16"]
    assert len(coupled["diagnosis"]["tv"]) == 15 and 0 <= coupled["diagnosis"]["mean_tv"] <= 1
    assert len(coupled["acceptance_per_position"]) == 15
    assert "tv" not in lookup["diagnosis"] and lookup["diagnosis"]["carried_share"][0] == 0.0
    text = _results(result, "text")
    draft = text["draft-model w=6"]["diagnosis"]
    assert draft["carried_share"][0] == 1.0 and draft["tv"][0] is not None  # every draft-model draft keeps its q
    assert text["draft-model w=6"]["window"] == 6 and text["lookup w=4"]["mean_acceptance_length"] >= 1


def test_eagle_entries_take_the_model_folders_head(tiny_heads):
    from benchmarks.suite import run_suite
    from benchmarks.suite.cases import CountCase
    from mmspec.bench import Entry

    entries = (Entry("ar"), Entry({"name": "eagle", "exact": True}, 4, "eagle(exact) w=4"),
               Entry({"name": "eagle", "jacobi": 1}, 4, "eagle(jacobi=1) w=4"))
    result = run_suite([CountCase("image", 2, 2, entries)], models={"image": tiny_heads / "image"},
                       log=lambda line: None)
    rows = _results(result, "image")
    spliced = rows["eagle(jacobi=1) w=4"]
    assert rows["eagle(exact) w=4"]["identical_to_ar"] == 4
    assert spliced["method"] == "eagle(jacobi=1)" and len(spliced["acceptance_per_position"]) == 3


def test_hot_runs_change_temperature_and_top_k_only_and_raise_the_entropy_of_p(tiny_acceptance):
    result = tiny_acceptance[0]
    # the tiny models sample at temperature 1, top-k 20, CFG 2: top-k goes, the CFG stays
    assert _case(result, "image", one_row=True)["sampling_used"] == {"temperature": 1.0, "top_k": 20, "cfg_scale": 2.0}
    assert _case(result, "image", one_row=True, hot=True)["sampling_used"] == {
        "temperature": 1.0, "top_k": None, "cfg_scale": 2.0, "top_p": None}
    default, hot = _results(result, "image", one_row=True), _results(result, "image", one_row=True, hot=True)
    assert set(hot) == set(default) and hot["ar"]["nfe_ratio"] == 1.0
    # top-k 20 of 32 tokens cut the tail: without it p spreads further
    assert hot["ar"]["diagnosis"]["mean_entropy"] > default["ar"]["diagnosis"]["mean_entropy"]

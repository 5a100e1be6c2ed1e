from mmspec.pipelines.base import DEFAULT_METHOD
from benchmarks.suite.cases import (ACCEPTANCE_METHODS, HOT, TEXT_ACCEPTANCE_METHODS, WINDOWS, CountCase, GridCase,
                                LosslessCase, TextCase, acceptance, acceptance_windows, quick, spec_label)


def test_quick_covers_batch_sizes_windows_text_and_lossless_checks():
    cases = quick()
    grids = [c for c in cases if isinstance(c, GridCase)]
    assert sorted((c.kind, c.rows) for c in grids if c.sweep == "rows") == [
        (k, n) for k in ("image", "video") for n in (1, 4, 8, 16)]
    rows_case = next(c for c in grids if c.sweep == "rows")
    assert [str(e) for e in rows_case.entries] == ["jacobi", "coupled", "gumbel", "exact", "auto"]
    assert all([str(e) for e in c.entries] == ["auto"] for c in grids if c.rows == 16)  # the default alone
    auto = rows_case.entries[-1]
    assert auto.window == "auto" and auto.name == DEFAULT_METHOD == "exact"
    for kind in ("image", "video"):
        sweep = next(c for c in grids if c.sweep == "window" and c.kind == kind)
        assert sweep.rows == 1 and sorted({e.window for e in sweep.entries}) == list(WINDOWS[kind])
        assert {e.name for e in sweep.entries} == {"coupled", "exact"}
    text = [c for c in cases if isinstance(c, TextCase)]
    assert {(c.rows, c.greedy) for c in text} == {(1, True), (1, False), (8, True), (8, False)}
    single = next(c for c in text if c.rows == 1)
    assert single.methods == ("ar", "draft-model", "lookup") and single.baselines == ("generate", "assisted", "prompt-lookup")
    assert {c.kind for c in cases if isinstance(c, LosslessCase)} == {"image", "video", "text"}


def test_quick_takes_batch_sizes_kinds_and_the_absence_of_a_draft():
    cases = quick(rows=(1, 8, 32), kinds=("text",), draft=False)
    assert {c.kind for c in cases} == {"text"}
    batch = [c for c in cases if isinstance(c, TextCase) and c.rows > 1]
    assert {c.rows for c in batch} == {32} and all(c.prompts == 32 for c in batch)
    names = [m for c in cases for m in getattr(c, "methods", ())] + [str(e) for c in cases for e in getattr(c, "entries", ())]
    assert "draft-model" not in names and all("assisted" not in getattr(c, "baselines", ()) for c in cases)


def test_acceptance_runs_every_method_at_every_window_then_one_row_at_a_time():
    cases = acceptance()
    assert [(c.kind, c.one_row, c.rows, c.sampling == HOT) for c in cases] == [
        (k, one, n, hot) for k in ("image", "video", "text")
        for one, n, hot in ((False, 8, False), (True, 2, False)) + (((True, 2, True),) if k != "text" else ())]
    for c in cases:
        assert isinstance(c, CountCase) and str(c.entries[0]) == "ar"
        methods = ACCEPTANCE_METHODS if c.kind != "text" else TEXT_ACCEPTANCE_METHODS
        windows = {(spec_label(e.method), e.window) for e in c.entries[1:]}
        if c.one_row:
            default = {"image": 16, "video": 64, "text": 8}[c.kind]
            capped = {"lookup": 8, "jacobi": min(default, 32)} if c.kind != "text" else {}
            assert windows == {(spec_label(m), capped.get(spec_label(m), default)) for m in methods}
        else:
            assert windows == {(spec_label(m), w) for m in methods for w in acceptance_windows(c.kind, m)}
    assert acceptance_windows("video", "coupled") == (4, 8, 16, 32, 64, 128)
    assert acceptance_windows("video", {"name": "lookup"}) == acceptance_windows("image", "lookup") == (4, 8)
    assert acceptance_windows("video", "jacobi") == (4, 8, 16, 32)
    text = [c for c in cases if c.kind == "text"]
    assert all(c.sampling == {"temperature": 0.8, "top_p": 0.95} and not c.over_default for c in text)
    assert all(c.sampling is None for c in cases if c.kind != "text" and not c.over_default)
    assert {e.name for c in acceptance(kinds=("text",), draft=False) for e in c.entries} == {"ar", "lookup"}


def test_a_method_added_to_the_tuple_runs_everywhere_and_dict_specs_get_labels(monkeypatch):
    import benchmarks.suite.cases as cases_module

    spec = {"name": "coupled", "init": "above"}
    monkeypatch.setattr(cases_module, "ACCEPTANCE_METHODS", ACCEPTANCE_METHODS + (spec,))
    image = acceptance(kinds=("image",))
    assert [str(e) for e in image[1].entries][-1] == "coupled(init=above) w=16"
    assert sum(e.method == spec for e in image[0].entries) == len(acceptance_windows("image", spec))
    assert spec_label("exact") == "exact"


def test_a_kind_whose_model_has_a_head_runs_it_in_the_acceptance_suite():
    from benchmarks.suite.cases import HEAD_ACCEPTANCE_METHODS, TEXT_HEAD_ACCEPTANCE_METHODS

    cases = acceptance(heads=("image", "text"))
    labels = {kind: {spec_label(e.method) for c in cases if c.kind == kind for e in c.entries}
              for kind in ("image", "video", "text")}
    assert {spec_label(m) for m in HEAD_ACCEPTANCE_METHODS} <= labels["image"]
    assert {spec_label(m) for m in TEXT_HEAD_ACCEPTANCE_METHODS} <= labels["text"]
    assert not any(label.startswith("eagle") for label in labels["video"])
    assert acceptance_windows("image", {"name": "eagle", "exact": True}) == (4, 8)  # the head alone stops at 8
    assert acceptance_windows("image", {"name": "eagle", "exact": True, "jacobi": 1}) == WINDOWS["image"]


def test_grids_repeat_the_one_row_runs_at_temperature_1_heads_included():
    cases = acceptance(heads=("image", "video", "text"))
    for kind in ("image", "video"):
        single, hot = [c for c in cases if c.kind == kind and c.one_row]
        # temperature 1, no top-k / top-p, over the model's default (its CFG kept), on the same rows and entries
        assert hot.sampling == {"temperature": 1.0, "top_k": None, "top_p": None} and hot.over_default
        assert hot.entries == single.entries and (hot.prompts, hot.samples) == (single.prompts, single.samples)
        assert {e.name for e in hot.entries} >= {"ar", "eagle", "jacobi", "coupled", "gumbel", "exact", "lookup", "pac"}
    assert not any(c.over_default for c in cases if c.kind == "text")

from mmspec.pipelines.base import DEFAULT_METHOD
from mmspec.suite.cases import SUITES, WINDOWS, GridCase, LosslessCase, TextCase, quick


def test_quick_covers_batch_sizes_windows_text_and_lossless_checks():
    cases = SUITES["quick"]()
    grids = [c for c in cases if isinstance(c, GridCase)]
    assert sorted((c.kind, c.rows) for c in grids if c.sweep == "rows") == [
        (k, n) for k in ("image", "video") for n in (1, 4, 8)]
    rows_case = next(c for c in grids if c.sweep == "rows")
    assert [str(e) for e in rows_case.entries] == ["jacobi", "coupled", "gumbel", "exact", "auto"]
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

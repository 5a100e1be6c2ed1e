"""A request's memory is estimated before any work; large requests run in batches that fit, with the same rows."""
import pytest
import torch

import mmspec
from mmspec import memory
from tiny import tiny_gpt


@pytest.fixture
def target():
    return mmspec.ReferenceTarget(tiny_gpt(dtype=torch.float32))


def _gen(target, **kw):
    kw = {"method": "coupled", "window": 3, "sampling": {"cfg_scale": 2.0, "top_k": 8}, "seed": 5, **kw}
    return mmspec.generate(target, torch.tensor([0, 2, 3]), mmspec.Grid2D(3, 3), num_samples=3, **kw)


@pytest.mark.parametrize("given", [None, "row", "condition", "all"])
def test_batches_give_the_same_rows_and_stats_as_one_call(target, given):
    g = {"row": torch.randint(-1, 16, (9, 9), generator=torch.Generator().manual_seed(0)),
         "condition": torch.tensor([[3, -1, -1, 4, -1, -1, -1, -1, -1]] * 3), "all": torch.full((1, 9), -1)}.get(given)
    whole = _gen(target, given=g)
    seen = set()
    parts = _gen(target, given=g, batch_size=4, on_commit=lambda state, k: seen.add((state.first_row, len(state.n))))
    assert torch.equal(whole.tokens, parts.tokens) and torch.equal(whole.lengths, parts.lengths)
    assert torch.equal(whole.stats.committed, parts.stats.committed) and parts.stats.commit_step.shape == (9, 9)
    assert seen == {(0, 4), (4, 4), (8, 1)}


def test_rows_that_do_not_fit_run_in_batches_that_do(target, monkeypatch):
    per_row = memory.row_bytes(target, mmspec.Grid2D(3, 3), cfg=True, window=3)
    monkeypatch.setattr(memory, "free_bytes", lambda device: 2 * (memory.fixed_bytes() + 4 * per_row))
    sizes = []
    _gen(target, on_commit=lambda state, k: sizes.append(len(state.seq)))
    assert max(sizes) == 4


def test_a_batch_that_does_not_fit_is_refused_in_one_line_before_any_work(target, monkeypatch):
    per_row = memory.row_bytes(target, mmspec.Grid2D(3, 3), cfg=True, window=3)
    monkeypatch.setattr(memory, "free_bytes", lambda device: 2 * (memory.fixed_bytes() + 4 * per_row))
    monkeypatch.setattr(target, "session", None)  # any work would fail otherwise
    with pytest.raises(ValueError, match=r"^6 rows at a time need about .* GiB \(KV cache, logits and drafts, CFG's "
                                         r"copies included\) and .* GiB is free for them, which holds 4 rows: pass "
                                         r"batch_size=4 \(CLI: --batch-size 4\)$"):
        _gen(target, batch_size=6)
    monkeypatch.setattr(memory, "free_bytes", lambda device: memory.fixed_bytes())
    with pytest.raises(ValueError, match="which holds not even one row"):
        _gen(target)


def test_the_estimate_counts_cfg_s_copies_and_the_window(target):
    layout = mmspec.Grid2D(3, 3)
    assert memory.row_bytes(target, layout, cfg=True, window=3) > memory.row_bytes(target, layout, cfg=False, window=3)
    assert memory.row_bytes(target, layout, cfg=False, window=8) > memory.row_bytes(target, layout, cfg=False, window=3)
    assert memory.row_bytes(object(), layout, cfg=False, window=3) is None
    assert memory.free_bytes("cpu") > 0

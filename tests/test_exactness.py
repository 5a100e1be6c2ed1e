"""Token-for-token guarantees: greedy equals plain greedy, `exact` equals `ar`, batch rows equal single runs."""
import pytest
import torch

import mmspec
from tiny import CycleWindow, TabularTarget, tiny_gpt, tiny_head

PROACTIVE = [{"name": "exact", "proactive": [3, 2]}, {"name": "exact", "proactive": [5, 4]},
             {"name": "draft-model", "proactive": [3, 2]}]
EAGLE = [{"name": "eagle"}, {"name": "eagle", "jacobi": 2}, {"name": "eagle", "exact": True, "jacobi": 1},
         {"name": "eagle", "proactive": [3, 2]}, {"name": "eagle", "exact": True, "proactive": [4, 3]},
         {"name": "eagle", "tree": [6, 3]}, {"name": "eagle", "exact": True, "tree": 12},
         {"name": "eagle", "lookup": True}, {"name": "eagle", "lookup": False}, {"name": "eagle", "stop": 0.2}]
ALL = ["ar", "jacobi", "coupled", "gumbel", "exact", "lookup", "draft-model", "pac"] + PROACTIVE + EAGLE
LAYOUTS = {
    "1d": (mmspec.Sequence1D(14), 1),
    "2d": (mmspec.Grid2D(4, 4), 2),
    "2d-row-end": (mmspec.Grid2D(3, 4, row_end_token=15), 2),
    "3d": (mmspec.Grid3D(2, 3, 3), 3),
}
SAMPLING = mmspec.Sampling(temperature=0.9, top_k=12, cfg_scale=2.5)


def _target(axes, seed=0):
    return mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=axes, seed=seed))


def _with_draft(method, axes):
    if method == "draft-model" or isinstance(method, dict) and method["name"] == "draft-model":
        return {**({"name": method} if isinstance(method, str) else method), "model": _target(axes, seed=3)}
    if isinstance(method, dict) and method["name"] == "eagle":  # a head over the target's 2 layers and its output
        return {**method, "head": tiny_head(16, 24, rope_axes=axes, seed=3, dtype=torch.float64)}
    return method


def _run(target, layout, method, **kw):
    method = _with_draft(method, layout.axes)
    kw = {"sampling": SAMPLING, "window": 5, "seed": 0, **kw}
    return mmspec.generate(target, torch.tensor([0, 3]), layout, method=method, num_samples=2, **kw)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("method", ALL, ids=str)
def test_greedy_equals_plain_greedy(layout, method):
    layout, axes = LAYOUTS[layout]
    target = _target(axes)
    greedy = {"temperature": 0.0, "cfg_scale": 2.5}
    expected = _run(target, layout, "ar", sampling=greedy).tokens
    got = _run(target, layout, method, sampling=greedy, window=6)
    assert torch.equal(got.tokens, expected)
    assert got.stats.committed.sum() == expected.numel()


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("init", ["random", "left", "above", "prev-frame", "ngram", "pool"])
@pytest.mark.parametrize("window", [2, 3, 5, 8, 17])
def test_exact_equals_ar_with_the_same_seed(layout, init, window):
    layout, axes = LAYOUTS[layout]
    target = _target(axes)
    expected = _run(target, layout, "ar").tokens
    got = _run(target, layout, {"name": "exact", "init": init}, window=window).tokens
    assert torch.equal(got, expected)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("proactive", [[3, 2], [4, 3], [2, 1]], ids=str)
@pytest.mark.parametrize("window", [2, 4, 9])
def test_exact_with_proactive_branches_equals_ar(layout, proactive, window):
    layout, axes = LAYOUTS[layout]
    target = _target(axes)
    expected = _run(target, layout, "ar").tokens
    got = _run(target, layout, {"name": "exact", "proactive": proactive}, window=window)
    assert torch.equal(got.tokens, expected)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("options", [{}, {"jacobi": 1}, {"jacobi": 3}, {"proactive": [3, 2]}, {"proactive": [4, 3]},
                                     {"proactive": [2, 1]}, {"tree": [6, 3]}, {"tree": [2, 2]}, {"tree": [20, 4]},
                                     {"tree": [6, 3], "exact": False}, {"lookup": True}, {"lookup": False},
                                     {"lookup": True, "tree": [6, 3]}, {"lookup": True, "tree": [6, 3], "exact": False},
                                     {"stop": 0.2}, {"stop": 0.2, "jacobi": 2}],
                         ids=str)
@pytest.mark.parametrize("window", [2, 4, 9, "auto"])
def test_exact_with_a_draft_head_equals_ar(layout, options, window):
    layout, axes = LAYOUTS[layout]
    target = _target(axes)
    expected = _run(target, layout, "ar").tokens
    got = _run(target, layout, {"name": "eagle", "exact": True, **options}, window=window)
    assert torch.equal(got.tokens, expected)
    assert 0 < got.stats.accepted.sum() < got.stats.drafted.sum()  # the head's drafts were both kept and refused


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("method", [{"name": "exact", "init": "random"}, {"name": "exact", "init": "above"},
                                    {"name": "exact", "init": "ngram"}, {"name": "exact", "proactive": [3, 3]},
                                    {"name": "eagle", "exact": True}, {"name": "eagle", "exact": True, "jacobi": 2},
                                    {"name": "eagle", "exact": True, "proactive": [3, 3]},
                                    {"name": "eagle", "exact": True, "tree": [8, 3]}],
                         ids=str)
@pytest.mark.parametrize("sizes", [(3, 1, 6, 2, 8), (9, 4, 1, 1, 12)], ids=str)
def test_exact_equals_ar_with_a_window_that_changes_every_step(layout, method, sizes):
    layout, axes = LAYOUTS[layout]
    target = _target(axes)
    expected = _run(target, layout, "ar").tokens
    got = _run(target, layout, method, window=CycleWindow(sizes))
    assert torch.equal(got.tokens, expected)
    used = got.stats.forwards_at.sum(0)  # forwards that had a slot j: every L in the cycle was used
    assert used[max(sizes) - 2] > 0 and used[0] < got.stats.nfe.sum()


@pytest.mark.parametrize("method", ALL, ids=str)
def test_greedy_equals_plain_greedy_with_a_changing_window(method):
    layout, axes = LAYOUTS["2d-row-end"]
    target = _target(axes)
    greedy = {"temperature": 0.0, "cfg_scale": 2.5}
    expected = _run(target, layout, "ar", sampling=greedy).tokens
    got = _run(target, layout, method, sampling=greedy, window=CycleWindow((2, 7, 1, 4)))
    assert torch.equal(got.tokens, expected)


def test_exact_is_seed_dependent_and_structural_tokens_are_forced():
    layout, axes = LAYOUTS["2d-row-end"]
    target = _target(axes)
    a, b = _run(target, layout, "exact").tokens, _run(target, layout, "exact", seed=1).tokens
    assert not torch.equal(a, b)
    assert (a.view(4, 3, 5)[..., 4] == 15).all()


# a row's draws follow the other rows where a lookup drafts alone in a step (every row took it) and the drafter
# beside it does not draw (mmspec.drafters.lookup.LookupOrDrafter), or where a head's chain goes on while any row's
# head is sure (`stop`): its tokens keep their law, not their seed's
@pytest.mark.parametrize("method", [m for m in ALL if not (isinstance(m, dict) and (m.get("lookup") or m.get("stop")))],
                         ids=str)
def test_batch_rows_equal_single_runs(method):
    layout, axes = LAYOUTS["2d"]
    target = _target(axes)
    seeds = [11, 5, 7, 2]
    batch = _run(target, layout, method, seed=seeds)
    for i, s in enumerate(seeds):
        cond = torch.tensor([[0, 3][i // 2]])
        m = _with_draft(method, axes)
        single = mmspec.generate(target, cond, layout, method=m, sampling=SAMPLING, window=5, seed=[s])
        assert torch.equal(batch.tokens[i], single.tokens[0]), f"row {i}"
        assert batch.stats.nfe[i] == single.stats.nfe[0]


def test_stats_are_consistent():
    layout, axes = LAYOUTS["2d-row-end"]
    g = _run(_target(axes), layout, "coupled", window=6)
    s = g.stats
    assert (s.committed == layout.length).all()
    assert (s.commit_step >= 0).all() and (s.commit_step.max(1).values + 1 == s.nfe).all()
    assert (s.accepted <= s.drafted).all() and (s.accepted_at.sum(1) == s.accepted).all()
    assert abs(s.mean_acceptance_length - s.committed.sum().item() / s.nfe.sum().item()) < 1e-12
    assert len(s.acceptance_per_position) == 5
    ar = _run(_target(axes), layout, "ar").stats
    # AR commits each row-end token in the forward of the token after it; the last one has a forward of its own
    free = int((layout.forced() < 0).sum())
    assert layout.forced()[-1] >= 0 and (ar.nfe == free + 1).all() and (ar.drafted == 0).all()


def test_stop_tokens_end_rows_early():
    target = TabularTarget(3, 6, seed=1)
    g = mmspec.generate(target, torch.tensor([0]), mmspec.Sequence1D(6), method="coupled", window=4,
                        num_samples=50, stop_tokens=[2])
    for row, n in zip(g.tokens, g.lengths.tolist()):
        body = row[:n].tolist()
        assert (row[n:] == -1).all()
        assert 2 not in body[:-1] and (body[-1] == 2 or n == 6)


def test_a_row_ended_behind_its_window_does_not_disturb_the_others():
    """on_commit may end a row with fewer tokens than it has committed (a stop string): the other
    rows go on exactly as in a batch-1 run."""
    layout, axes = LAYOUTS["1d"]
    target = _target(axes)

    def cut_row_0(state, k):  # (the hook sees the request's rows running now: row_ids says which)
        if 0 in state.row_ids:
            i = state.row_ids.index(0)
            if state.active[i] and int(state.n[i]) >= 6:
                state.finish(i, 3)

    out = mmspec.generate(target, torch.tensor([0, 3]), layout, method="exact", window=5, sampling=SAMPLING,
                          seed=[4, 9], on_commit=cut_row_0)
    alone = mmspec.generate(target, torch.tensor([3]), layout, method="ar", sampling=SAMPLING, seed=[9])
    assert out.lengths.tolist() == [3, layout.length] and torch.equal(out.tokens[1], alone.tokens[0])
    assert (out.tokens[0, 3:] == -1).all()

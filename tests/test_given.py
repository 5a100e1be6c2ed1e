"""Given tokens: fixed in advance at any positions, committed as they are, seen as context."""
import pytest
import torch

import mmspec
from tiny import TabularTarget, chi_square_pvalue, sequence_id, tabular_law, tiny_gpt, tiny_head

SAMPLES = 20_000
PLACES = {"start": {0: 2}, "middle": {2: 1}, "scattered": {0: 1, 3: 0}}


def _given(places: dict, length: int) -> torch.Tensor:
    g = torch.full((1, length), -1)
    for i, t in places.items():
        g[0, i] = t
    return g


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("method", ["ar", "coupled", "gumbel", "exact", "lookup", "draft-model", "pac",
                                    {"name": "draft-model", "proactive": [3, 2]}], ids=str)
def test_matches_the_exact_law_of_ar_with_the_given_tokens_written_in(place, method):
    target, sampling = TabularTarget(3, 5, seed=4), mmspec.Sampling(temperature=1.1, top_k=2, cfg_scale=1.5)
    if method == "draft-model" or isinstance(method, dict):
        method = {"name": "draft-model", **(method if isinstance(method, dict) else {}),
                  "model": TabularTarget(3, 5, seed=44)}
    g = mmspec.generate(target, torch.tensor([0]), mmspec.Sequence1D(5), method=method, window=4, sampling=sampling,
                        seed=0, num_samples=SAMPLES, given=_given(PLACES[place], 5))
    law = tabular_law(target, 0, sampling, given=PLACES[place])
    assert chi_square_pvalue(sequence_id(g.tokens, 3), law) > 1e-3


@pytest.mark.parametrize("method", ["coupled", "exact", "lookup", "draft-model"])
def test_a_window_widened_over_given_tokens_keeps_the_law(method):
    """A run of given tokens at least as long as the window: one forward takes the run and the token after it."""
    target, sampling = TabularTarget(3, 6, seed=4), mmspec.Sampling(temperature=1.1, top_k=2, cfg_scale=1.5)
    if method == "draft-model":
        method = {"name": "draft-model", "model": TabularTarget(3, 6, seed=44)}
    places = {0: 2, 1: 0, 3: 1}
    g = mmspec.generate(target, torch.tensor([0]), mmspec.Sequence1D(6), method=method, window=2, sampling=sampling,
                        seed=0, num_samples=SAMPLES, given=_given(places, 6))
    assert (g.stats.commit_step[:, :3] == 0).all()  # the first forward: both given tokens and the one after them
    assert chi_square_pvalue(sequence_id(g.tokens, 3), tabular_law(target, 0, sampling, given=places)) > 1e-3


def test_ar_takes_a_run_of_given_tokens_in_one_forward():
    layout, target = mmspec.Grid2D(4, 4), mmspec.ReferenceTarget(tiny_gpt(vocab_size=16))
    given = torch.full((1, 16), -1)
    given[0, :4] = torch.tensor([3, 1, 4, 1])  # a first row
    given[0, 9] = given[0, 15] = 7
    kw = dict(sampling={"temperature": 0.9, "cfg_scale": 2.5}, seed=3, given=given)
    ar = mmspec.generate(target, torch.tensor([0]), layout, method="ar", **kw)
    free = int((given < 0).sum())
    assert ar.stats.nfe.item() == free + 1  # each forward: one free token after any given ones; the last: its own
    assert ar.stats.commit_step[0, :5].tolist() == [0] * 5 and ar.stats.commit_step[0, 9] == ar.stats.commit_step[0, 10]
    exact = mmspec.generate(target, torch.tensor([0]), layout, method="exact", window=3, **kw)
    assert torch.equal(exact.tokens, ar.tokens)


def test_forced_runs_count_the_forced_indices_from_each_one_on():
    from mmspec.state import forced_runs
    assert forced_runs(torch.tensor([[-1, 3, 3, -1, 2], [1, -1, -1, 0, 0]])).tolist() == [[0, 2, 1, 0, 1],
                                                                                           [1, 0, 0, 2, 1]]


def test_the_test_has_power_against_given_tokens_the_model_does_not_see():
    """Writing the given tokens into the output after sampling without them is a different law."""
    target, sampling = TabularTarget(3, 5, seed=4), mmspec.Sampling(cfg_scale=1.5)
    g = mmspec.generate(target, torch.tensor([0]), mmspec.Sequence1D(5), method="coupled", window=4,
                        sampling=sampling, seed=0, num_samples=SAMPLES)
    tokens = g.tokens.clone()
    tokens[:, 2] = 1
    assert chi_square_pvalue(sequence_id(tokens, 3), tabular_law(target, 0, sampling, given={2: 1})) < 1e-3


def _exact_and_ar_with_given_tokens(method, window):
    layout = mmspec.Grid2D(4, 4)
    target = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16))
    given = torch.full((4, 16), -1)
    given[0, :4] = torch.tensor([3, 1, 4, 1])  # a known first row
    given[1, 5:11] = 7  # a known region
    given[3, ::3] = 9  # scattered
    kw = dict(sampling={"temperature": 0.9, "top_k": 12, "cfg_scale": 2.5}, seed=0, num_samples=2, given=given)
    ar = mmspec.generate(target, torch.tensor([0, 3]), layout, method="ar", **kw)
    exact = mmspec.generate(target, torch.tensor([0, 3]), layout, method=method, window=window, **kw)
    assert torch.equal(exact.tokens, ar.tokens)
    return exact, ar, given


@pytest.mark.parametrize("jacobi", [None, 2])
@pytest.mark.parametrize("window", [2, 5])
def test_exact_with_a_draft_head_equals_ar_with_given_tokens(jacobi, window):
    head = tiny_head(16, 24, rope_axes=2, seed=3, dtype=torch.float64)
    exact, _, _ = _exact_and_ar_with_given_tokens({"name": "eagle", "head": head, "exact": True, "jacobi": jacobi},
                                                  window)
    assert exact.stats.accepted.sum() > 0


@pytest.mark.parametrize("init", ["random", "above", "left", "pool"])
@pytest.mark.parametrize("window", [2, 5, 9])
@pytest.mark.parametrize("proactive", [None, [4, 2]], ids=["chain", "proactive"])
def test_exact_equals_ar_with_given_tokens(init, window, proactive):
    method = {"name": "exact", "init": init, **({"proactive": proactive} if proactive else {})}
    exact, ar, given = _exact_and_ar_with_given_tokens(method, window)
    assert torch.equal(ar.tokens[given >= 0], given[given >= 0])
    free = (given < 0).sum(1)
    assert (exact.stats.drafted >= 0).all() and (exact.stats.accepted <= exact.stats.drafted).all()
    assert (ar.stats.drafted == 0).all() and free.min() > 0


def test_given_per_condition_is_shared_by_its_samples():
    target = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16))
    given = torch.full((2, 16), -1)
    given[0, 0], given[1, 0] = 5, 6
    out = mmspec.generate(target, torch.tensor([0, 3]), mmspec.Grid2D(4, 4), method="coupled", window=4,
                          num_samples=3, given=given)
    assert out.tokens[:3, 0].tolist() == [5, 5, 5] and out.tokens[3:, 0].tolist() == [6, 6, 6]


def test_bad_given_is_refused():
    target, layout = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16)), mmspec.Grid2D(3, 4, row_end_token=15)
    gen = lambda given, **kw: mmspec.generate(target, torch.tensor([0]), layout, given=given, **kw)  # noqa: E731
    with pytest.raises(ValueError, match=r"given must be token ids \[rows, 15\]"):
        gen(torch.full((1, 12), -1))
    with pytest.raises(ValueError, match="must be in"):
        gen(torch.full((1, 15), 16))
    clash = torch.full((1, 15), -1)
    clash[0, 4] = 3
    with pytest.raises(ValueError, match="index 4 differs from the layout's structural token 15"):
        gen(clash)
    with pytest.raises(ValueError, match="given has 3 rows"):
        gen(torch.full((3, 15), -1), num_samples=2)

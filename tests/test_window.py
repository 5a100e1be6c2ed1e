"""Window policies: `auto` picks the window that pays, and any window sequence stays lossless."""
import pytest
import torch

import mmspec
from mmspec.window import AutoWindow
from tiny import TabularTarget, chi_square_pvalue, sequence_id, tabular_law, tiny_gpt


class FakeState:
    def __init__(self, rows=2):
        self.seq = torch.zeros(rows, 4, dtype=torch.long)
        self.batch_size = rows
        self.active = torch.ones(rows, dtype=torch.bool)


def _run(policy, steps, seconds_of, k_of):
    """Drive a policy as the loop does, with a step cost seconds_of(L) and commits k_of(L) per row."""
    state, chosen = FakeState(), []
    for _ in range(steps):
        L = policy(state)
        chosen.append(L)
        policy.observe(state, torch.full((state.batch_size,), k_of(L)), seconds_of(L))
    return chosen


def test_auto_tries_every_width_then_keeps_plain_ar_when_drafts_are_never_accepted():
    chosen = _run(AutoWindow(max_window=16), 12, seconds_of=lambda L: 0.01 * L ** 0.5, k_of=lambda L: 1)
    assert chosen[:5] == [1, 2, 4, 8, 16] and chosen[5:] == [1] * 7
    chosen = _run(AutoWindow(max_window=16), 40, seconds_of=lambda L: 0.01 * L ** 0.5, k_of=lambda L: 1)
    assert chosen.count(1) >= 30 and len(set(chosen[5:])) == 2  # and a wider window now and then


def test_auto_goes_wide_when_a_forward_costs_the_same_at_any_width_and_drafts_are_accepted():
    chosen = _run(AutoWindow(max_window=16), 12, seconds_of=lambda L: 0.01, k_of=lambda L: L)
    assert set(chosen[5:]) == {16}


def test_auto_balances_cost_and_acceptance():
    # half of the drafts survive each slot: E[k | L] = 2 - 2^(1-L), while a step costs 1 + L/4
    k_of = {1: 1, 2: 2, 4: 2, 8: 2, 16: 2}.get  # two rows: one accepts one draft, other accepts none
    policy = AutoWindow(max_window=16)
    state = FakeState()
    for _ in range(20):
        L = policy(state)
        k = torch.tensor([min(2, L), 1])
        policy.observe(state, k, 1 + L / 4)
    assert policy(state) == 2  # (1 + 0.5) / 1.5 beats 1 / 1.25 and every wider window


def test_auto_shares_costs_by_key_across_generations():
    first = AutoWindow(max_window=4, key="model-a")
    _run(first, 3, seconds_of=lambda L: 0.01, k_of=lambda L: L)
    again = AutoWindow(max_window=4, key="model-a")
    # costs are known: only the acceptance of the widths is explored again, no step at L = 1
    assert _run(again, 4, seconds_of=lambda L: 0.01, k_of=lambda L: L) == [2, 4, 4, 4]


@pytest.mark.parametrize("layout", [mmspec.Grid2D(4, 4), mmspec.Sequence1D(14)], ids=repr)
def test_exact_equals_ar_with_auto(layout):
    target = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=layout.axes))
    kw = dict(sampling={"temperature": 0.9, "top_k": 12, "cfg_scale": 2.5}, seed=0, num_samples=2)
    ar = mmspec.generate(target, torch.tensor([0, 3]), layout, method="ar", **kw)
    auto = mmspec.generate(target, torch.tensor([0, 3]), layout, method="exact", window="auto", **kw)
    assert torch.equal(auto.tokens, ar.tokens)


@pytest.mark.parametrize("method", ["coupled", "lookup"])
def test_auto_matches_the_exact_law(method):
    target = TabularTarget(3, 4, seed=5)
    sampling = mmspec.Sampling(temperature=1.3, top_p=0.9, cfg_scale=2.0)
    g = mmspec.generate(target, torch.tensor([0]), mmspec.Grid2D(2, 2), method=method,
                        window=AutoWindow(max_window=4), sampling=sampling, seed=0, num_samples=20_000)
    assert chi_square_pvalue(sequence_id(g.tokens, 3), tabular_law(target, 0, sampling)) > 1e-3

"""The decode loop: rows kept in step (a batch whose forwards need no attention mask) stay lossless."""
import pytest
import torch

import mmspec
import mmspec.verify_step
from mmspec.window import AutoWindow, WindowMemory
from tiny import CycleWindow, TabularTarget, chi_square_pvalue, sequence_id, tabular_law, tiny_gpt

SAMPLES = 20_000
ALPHA = 1e-3


class InStep(CycleWindow):
    """Changing windows, with the batch's rows kept in step."""

    in_step = True


def _case():
    target, draft = TabularTarget(3, 4, seed=5), TabularTarget(3, 4, seed=98)
    sampling = mmspec.Sampling(temperature=1.3, top_p=0.9, cfg_scale=2.0)
    return target, draft, mmspec.Grid2D(2, 2), sampling


def _law_pvalue(method, window=InStep):
    target, draft, layout, sampling = _case()
    method = {"name": "draft-model", "model": draft} if method == "draft-model" else method
    g = mmspec.generate(target, torch.tensor([0]), layout, method=method, window=window((4, 3, 2)), sampling=sampling,
                        seed=0, num_samples=SAMPLES)
    return chi_square_pvalue(sequence_id(g.tokens, target.vocab_size), tabular_law(target, 0, sampling))


def test_in_step_counts_bring_every_running_row_to_the_least_index_reached():
    state = type("S", (), {})()
    state.n, state.active = torch.tensor([3, 5, 5, 9]), torch.tensor([True, True, True, False])
    k = torch.tensor([2, 1, 3, 0])  # reaches 5, 6, 8 (the done row does not count)
    assert mmspec.verify_step.in_step_counts(state, k).tolist() == [2, 0, 0, 0]
    state.n = torch.tensor([4, 4, 4, 9])  # in step: every row commits the fewest any commits
    assert mmspec.verify_step.in_step_counts(state, torch.tensor([3, 1, 2, 0])).tolist() == [1, 1, 1, 0]


@pytest.mark.parametrize("method", ["coupled", "exact", "lookup", "draft-model"])
def test_rows_in_step_keep_the_exact_law(method):
    # 20,000 rows in step commit what the unluckiest commits, one token a step: the real rule, mostly at slot 0
    assert _law_pvalue(method) > ALPHA


def _independent_caps(state, k):
    """A stand-in rule: each row stops at a count drawn independently of its draws (0: it waits a step)."""
    return torch.minimum(k, torch.randint(0, k.max().item() + 1, k.shape, generator=_independent_caps.gen))


@pytest.mark.parametrize("method", ["jacobi", "coupled", "exact", "lookup", "draft-model"])
def test_commits_cut_short_by_a_rule_independent_of_the_rows_draws_keep_the_exact_law(method, monkeypatch):
    # the argument in_step_counts rests on, at every depth: any count the verification allowed, cut by a rule that
    # does not look at what the row drew, including rows that commit nothing and carry their window on
    _independent_caps.gen = torch.Generator().manual_seed(0)
    monkeypatch.setattr(mmspec.verify_step, "in_step_counts", _independent_caps)
    assert _law_pvalue(method) > ALPHA


def test_the_law_test_catches_a_cut_that_looks_at_the_rows_own_outputs(monkeypatch):
    # a wrong rule: stop each row before its first output 0 past slot 0. Under `jacobi` the slot is drawn again (an
    # independent redraw from p) and comes out 0 only with p(0) again: token 0 becomes rarer than the law says.
    # (Under `coupled` the same cut is harmless: the carried output passes the next step as it is.)
    stopped = mmspec.verify_step._stopped

    def before_a_zero(verdict, k, stop_tokens):  # (where a stop token cuts a row: a cut that sees the outputs)
        slots = torch.arange(verdict.y.shape[1])
        zero = (verdict.y == 0) & (slots > 0)
        first = torch.where(zero.any(1), zero.long().argmax(1), verdict.y.shape[1])
        return stopped(verdict, torch.minimum(k, first), stop_tokens)

    monkeypatch.setattr(mmspec.verify_step, "_stopped", before_a_zero)
    assert _law_pvalue("jacobi", CycleWindow) < ALPHA  # (rows not in step: the cut bites past slot 0)


@pytest.mark.parametrize("layout", [mmspec.Grid2D(4, 4), mmspec.Sequence1D(14)], ids=repr)
def test_exact_in_step_equals_ar(layout):
    target = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=layout.axes))
    kw = dict(sampling={"temperature": 0.9, "top_k": 12, "cfg_scale": 2.5}, seed=0, num_samples=3)
    conditions = torch.tensor([0, 3])
    ar = mmspec.generate(target, conditions, layout, method="ar", **kw)
    got = mmspec.generate(target, conditions, layout, method="exact", window=InStep((4, 8, 2)), **kw)
    assert torch.equal(got.tokens, ar.tokens)
    assert (got.stats.nfe == got.stats.nfe[0]).all()  # every row took the same forwards: they stayed in step


def test_auto_keeps_rows_in_step_while_probing_or_running_plain_ar():
    policy = AutoWindow(max_window=16, memory=WindowMemory(prior={1: {1: 1.0, 4: 1.5, 16: 3.0}}))
    assert policy.in_step  # probing
    policy.best = 1
    assert policy.in_step
    policy.best = 16  # a wide window pays: each row commits what it can
    assert not policy.in_step

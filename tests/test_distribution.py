"""Every lossless method, sampled thousands of times, against the exact enumerated AR law."""
import dataclasses

import pytest
import torch

import mmspec
from mmspec.drafters import CoupledRedraw, JacobiDrafter, make_fill
from mmspec.methods import REGISTRY
from mmspec.steps import TreeDraft
from mmspec.verify import BranchVerifier, RejectionVerifier
from tiny import CycleWindow, TabularTarget, chi_square_pvalue, gpt_law, sequence_id, tabular_law, tiny_gpt

SAMPLES = 20_000
ALPHA = 1e-3
PROACTIVE = [{"name": "exact", "proactive": [3, 2]}, {"name": "gumbel", "proactive": [3, 3]},
             {"name": "jacobi", "proactive": [2, 1]}, {"name": "draft-model", "proactive": [3, 2]}]
# every registered method but those checked elsewhere: eagle drafts from a target's features, which a table target
# has not (tests/drafters/test_eagle.py checks its law on a tiny GPT)
ELSEWHERE = {"eagle"}
METHODS = [name for name in REGISTRY if name not in ELSEWHERE] + [
    {"name": "coupled", "init": "left"}, {"name": "gumbel", "init": "above"},
    {"name": "coupled", "init": "pool"}] + PROACTIVE


def _case(name):
    if name == "tabular-1d":
        target, draft = TabularTarget(3, 4, seed=2), TabularTarget(3, 4, seed=99)
        s = mmspec.Sampling(temperature=0.8, top_k=2, cfg_scale=1.5)
        return target, draft, mmspec.Sequence1D(4), s, tabular_law(target, 0, s)
    if name == "tabular-grid":
        target, draft = TabularTarget(3, 4, seed=5), TabularTarget(3, 4, seed=98)
        s = mmspec.Sampling(temperature=1.3, top_p=0.9, cfg_scale=2.0, cfg_mode="log_softmax")
        return target, draft, mmspec.Grid2D(2, 2), s, tabular_law(target, 0, s)
    model, layout = tiny_gpt(vocab_size=4, num_classes=2, block_size=4, dtype=torch.float32), mmspec.Grid2D(2, 2)
    target, draft = mmspec.ReferenceTarget(model), mmspec.ReferenceTarget(tiny_gpt(vocab_size=4, num_classes=2, seed=7, dtype=torch.float32))
    s = mmspec.Sampling(temperature=0.9, top_k=3, cfg_scale=1.5)
    return target, draft, layout, s, gpt_law(model, 0, layout, s)


CASES = {name: None for name in ("tabular-1d", "tabular-grid", "gpt-grid")}


def case(name):
    if CASES[name] is None:
        CASES[name] = _case(name)
    return CASES[name]


def _with_draft(method, draft):
    """'draft-model' (or its dict) with the case's draft model."""
    if method == "draft-model":
        return {"name": "draft-model", "model": draft}
    if isinstance(method, dict) and method["name"] == "draft-model":
        return {**method, "model": draft}
    return method


def _sample(target, layout, sampling, method, window=4):
    g = mmspec.generate(target, torch.tensor([0]), layout, method=method, window=window, sampling=sampling,
                        seed=0, num_samples=SAMPLES)
    return sequence_id(g.tokens, target.vocab_size)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("method", METHODS, ids=str)
def test_matches_exact_law(name, method):
    target, draft, layout, sampling, law = case(name)
    method = _with_draft(method, draft)
    pvalue = chi_square_pvalue(_sample(target, layout, sampling, method), law)
    assert pvalue > ALPHA, f"{method} on {name}: chi-square p = {pvalue:.2e}"


@pytest.mark.parametrize("name", ["tabular-grid", "gpt-grid"])
@pytest.mark.parametrize("method", [name for name in REGISTRY if name not in ELSEWHERE | {"ar"}] + [
    {"name": "coupled", "init": "above"}, {"name": "draft-model", "proactive": [4, 2]}], ids=str)
def test_matches_exact_law_with_a_window_that_changes_every_step(name, method):
    target, draft, layout, sampling, law = case(name)
    method = _with_draft(method, draft)
    pvalue = chi_square_pvalue(_sample(target, layout, sampling, method, window=CycleWindow((4, 2, 1, 3))), law)
    assert pvalue > ALPHA, f"{method} on {name} with changing windows: chi-square p = {pvalue:.2e}"


def test_window_of_three_and_batch_of_conditions():
    target, _, layout, sampling, _ = case("tabular-1d")
    g = mmspec.generate(target, torch.tensor([0, 1]), layout, method="coupled", window=3, sampling=sampling,
                        seed=0, num_samples=SAMPLES // 2)
    for c in (0, 1):
        ids = sequence_id(g.tokens[c * SAMPLES // 2:(c + 1) * SAMPLES // 2], 3)
        assert chi_square_pvalue(ids, tabular_law(target, c, sampling)) > ALPHA


class KeepOldQ(JacobiDrafter):
    """The public-SCD bug: a carried slot whose token was kept stores its old q instead of the new p."""

    def update(self, state, draft, verdict, logp, k):
        V = logp.shape[-1]
        q_old = torch.nn.functional.one_hot(draft.tokens, V).double()
        if draft.q is not None:
            q_old = torch.where(draft.onehot[..., None], q_old, draft.q)
        kept = verdict.accepted  # old slot j kept its token
        super().update(state, draft, verdict, logp, k)
        src = (torch.arange(logp.shape[1] - 1) + k[:, None]).clamp(max=logp.shape[1] - 2)  # new slot i <- old i + k
        carried_kept = (~self.onehot) & kept.gather(1, src)
        old = q_old.gather(1, src[..., None].expand(-1, -1, V)).to(self.q.dtype)
        self.q = torch.where(carried_kept[..., None], old, self.q)


def test_the_test_has_power_against_storing_the_old_q():
    target = TabularTarget(3, 4, seed=2)
    sampling = mmspec.Sampling(cfg_scale=1.5)
    law = tabular_law(target, 0, sampling)
    buggy = mmspec.Method("keep-old-q", lambda layout: KeepOldQ(CoupledRedraw(), make_fill("random")),
                          RejectionVerifier())
    assert chi_square_pvalue(_sample(target, mmspec.Sequence1D(4), sampling, buggy), law) < ALPHA
    assert chi_square_pvalue(_sample(target, mmspec.Sequence1D(4), sampling, "coupled"), law) > ALPHA


def _no_renormalising(first, siblings, q, p, u_accept, u_residual, live):
    """Wrong: every sibling is tested against q itself, not q with the tokens already tried removed."""
    chosen, r = torch.zeros_like(first), (p - q).clamp(min=0)
    for i in range(siblings.shape[1]):
        r = r / r.sum(-1, keepdim=True).clamp(min=1e-30)
        c = siblings[:, i]
        qc, rc = q.gather(-1, c[:, None]).squeeze(-1), r.gather(-1, c[:, None]).squeeze(-1)
        test = live & (chosen == 0) & (qc > 0)
        chosen = torch.where(test & (u_accept[:, i] * qc < rc), i + 1, chosen)
        r = torch.where((test & (chosen == 0))[:, None], (r - q).clamp(min=0), r)
    y = torch.where(chosen > 0, siblings.gather(1, (chosen - 1).clamp(min=0)[:, None]).squeeze(1),
                    mmspec.verify.sample_from(r, u_residual))
    return y, chosen


def _stale_residual(first, siblings, q, p, u_accept, u_residual, live):
    """Wrong: siblings are tested against p's first residual, never updated after a sibling fails."""
    chosen, r0, qi, tried = torch.zeros_like(first), (p - q).clamp(min=0), q, first
    r0 = r0 / r0.sum(-1, keepdim=True).clamp(min=1e-30)
    for i in range(siblings.shape[1]):
        qi = qi.scatter(-1, tried[:, None], 0.0)
        qi = qi / qi.sum(-1, keepdim=True).clamp(min=1e-30)
        c = tried = siblings[:, i]
        qc, rc = qi.gather(-1, c[:, None]).squeeze(-1), r0.gather(-1, c[:, None]).squeeze(-1)
        chosen = torch.where(live & (chosen == 0) & (qc > 0) & (u_accept[:, i] * qc < rc), i + 1, chosen)
    y = torch.where(chosen > 0, siblings.gather(1, (chosen - 1).clamp(min=0)[:, None]).squeeze(1),
                    mmspec.verify.sample_from(r0, u_residual))
    return y, chosen


@pytest.mark.parametrize("wrong", [_no_renormalising, _stale_residual], ids=lambda f: f.__name__)
def test_the_test_has_power_against_wrong_recursive_rejection(wrong, monkeypatch):
    target = TabularTarget(6, 3, seed=3, scale=1.5)  # a vocabulary wide enough for three siblings to matter
    sampling = mmspec.Sampling(cfg_scale=1.5)
    law = tabular_law(target, 0, sampling)
    assert chi_square_pvalue(_sample(target, mmspec.Sequence1D(3), sampling, "pac"), law) > ALPHA
    monkeypatch.setattr(mmspec.verify, "recursive_rejection", wrong)
    assert chi_square_pvalue(_sample(target, mmspec.Sequence1D(3), sampling, "pac"), law) < ALPHA


class IgnoresBranchQ(BranchVerifier):
    """Wrong: a draft model's branch children are tested against the chain's q of their slot, not their own."""

    def __call__(self, state, draft, logp, L):
        if isinstance(draft, TreeDraft):
            draft = dataclasses.replace(draft, branch_q=None)
        return super().__call__(state, draft, logp, L)


def test_the_test_has_power_against_testing_branch_children_under_the_chains_q():
    target, draft_target = TabularTarget(6, 3, seed=3, scale=1.5), TabularTarget(6, 3, seed=8, scale=1.5)
    sampling = mmspec.Sampling(cfg_scale=1.5)
    law = tabular_law(target, 0, sampling)
    right = mmspec.methods.draft_model(draft_target, proactive=[4, 2])
    wrong = dataclasses.replace(right, verifier=IgnoresBranchQ(RejectionVerifier()))
    assert chi_square_pvalue(_sample(target, mmspec.Sequence1D(3), sampling, right), law) > ALPHA
    assert chi_square_pvalue(_sample(target, mmspec.Sequence1D(3), sampling, wrong), law) < ALPHA


def _select_with_the_wrong_null_rows(self, rows):
    """Wrong: the rows kept take the null rows (CFG) of other rows, numbered from the batch left, not the batch."""
    R = torch.cat([rows, rows + len(rows)])
    self.cache.select(R)
    self.lengths, self.start_embedding = self.lengths[R], self.start_embedding[R]
    self.batch_size = len(rows)


def test_the_test_has_power_against_rows_left_with_the_wrong_null_rows(monkeypatch):
    """Rows that are done leave the forwards of the reference GPT's session (mmspec.adapters.rows), here at every
    step of the 20,000 rows: the gpt-grid law tests above pass through it, and catch a wrong choice of rows."""
    target, _, layout, sampling, law = case("gpt-grid")
    monkeypatch.setattr(mmspec.adapters.base.PrefixSession, "select", _select_with_the_wrong_null_rows)
    assert chi_square_pvalue(_sample(target, layout, sampling, "coupled"), law) < ALPHA

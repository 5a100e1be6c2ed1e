"""EAGLE-3 draft heads (method 'eagle'): the exact law for every variant, wrong variants the law test catches,
and heads in the published layout (what loads, what is refused)."""
import dataclasses

import pytest
import torch

import mmspec
from mmspec.drafters.eagle import EagleDrafter
from mmspec.verify import RejectionVerifier
from test_distribution import ALPHA, SAMPLES, case
from tiny import CycleWindow, chi_square_pvalue, gpt_law, sequence_id, tiny_gpt, tiny_head

VARIANTS = {"chain": {}, "exact": {"exact": True}, "coupled-splice": {"jacobi": 1},
            "exact-splice": {"exact": True, "jacobi": 2}}
CASES = {}


def eagle_case(name):
    """(target, head, layout, sampling, exact law): a 2x2 grid with CFG, and 1D text without it."""
    if name not in CASES:
        if name == "grid-cfg":
            target, _, layout, sampling, law = case("gpt-grid")
            head = tiny_head(24, 4, rope_axes=2, seed=3, dtype=torch.float32)
        else:
            model, layout = tiny_gpt(vocab_size=4, rope_axes=1, num_classes=2, block_size=5, dtype=torch.float32), \
                mmspec.Sequence1D(5)
            target, sampling = mmspec.ReferenceTarget(model), mmspec.Sampling(temperature=0.8, top_p=0.9)
            head = tiny_head(24, 4, rope_axes=1, seed=3, dtype=torch.float32)
            law = gpt_law(model, 0, layout, sampling)
        CASES[name] = target, head, layout, sampling, law
    return CASES[name]


def _sample(name, method, window=4):
    target, head, layout, sampling, _ = eagle_case(name)
    if isinstance(method, dict):
        method = {"name": "eagle", "head": head, **method}
    return mmspec.generate(target, torch.tensor([0]), layout, method=method, window=window, sampling=sampling,
                           seed=0, num_samples=SAMPLES)


@pytest.mark.parametrize("name", ["grid-cfg", "text-1d"])
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("window", [4, CycleWindow((4, 2, 1, 3))], ids=["window-4", "changing"])
def test_eagle_matches_exact_law(name, variant, window):
    g = _sample(name, VARIANTS[variant], window)
    law = eagle_case(name)[4]
    pvalue = chi_square_pvalue(sequence_id(g.tokens, 4), law)
    assert pvalue > ALPHA, f"eagle {variant} on {name}: chi-square p = {pvalue:.2e}"
    # the head's slot 0 is both accepted and rejected often: the test runs both paths of every step
    assert 0.15 < g.stats.acceptance_per_position[0] < 0.85


class NotRenormalised(EagleDrafter):
    """Wrong: q is the head's softmax masked to the top-k / top-p afterwards, never renormalised. The draws are
    still right (sample_from normalises its weights); the q reported to the verifier is too small."""

    def _q(self, state, z):
        B, untruncated = state.batch_size, dataclasses.replace(state.sampling, top_k=None, top_p=None)
        whole = untruncated.logp(z[:B], z[B:] if self.rows == 2 else None)
        return whole.masked_fill(super()._q(state, z) == -torch.inf, -torch.inf)


class ReportsAnotherTemperature(EagleDrafter):
    """Wrong: drafts are drawn from q, and the verifier is told q sharpened as by a lower temperature."""

    def propose(self, state, L):
        draft = super().propose(state, L)
        if draft.q is None:
            return draft
        sharper = draft.q ** 1.5
        return dataclasses.replace(draft, q=sharper / sharper.sum(-1, keepdim=True))


@pytest.mark.parametrize("wrong, name", [(NotRenormalised, "grid-cfg"), (NotRenormalised, "text-1d"),
                                         (ReportsAnotherTemperature, "grid-cfg")],
                         ids=["not-renormalised-grid", "not-renormalised-text", "another-temperature-grid"])
def test_the_law_test_has_power_against_a_head_that_reports_another_q(wrong, name):
    head = eagle_case(name)[1]
    method = mmspec.Method("eagle-wrong", lambda layout: wrong(head), RejectionVerifier())
    g = _sample(name, method)
    assert chi_square_pvalue(sequence_id(g.tokens, 4), eagle_case(name)[4]) < ALPHA

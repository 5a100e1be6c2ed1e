"""The lossless check passes on lossless methods and reports, loudly, a method that changes the output."""
import pytest
import torch

import mmspec
from mmspec.bench import Entry
import mmspec.lossless
from mmspec.lossless import check_lossless, format_lossless, score_gap
from mmspec.methods import Method, coupled
from mmspec.steps import Verdict
from mmspec.verify import RejectionVerifier


class AcceptsEveryDraft(RejectionVerifier):
    """A broken verifier: keeps every draft, whatever p says."""

    def __call__(self, state, draft, logp, L):
        verdict = super().__call__(state, draft, logp, L)
        return Verdict(torch.cat([draft.tokens, verdict.y[:, -1:]], 1), torch.ones_like(verdict.accepted),
                       verdict.index)


BROKEN = Method("broken", coupled().make_drafter, AcceptsEveryDraft())


@pytest.fixture(scope="module")
def image(tiny_models):
    return mmspec.ImagePipeline.from_pretrained(tiny_models / "image")


def test_lossless_methods_pass(image):
    check = check_lossless(image, ["red heart", "apple"], ["jacobi", "coupled", "exact", Entry("gumbel", "auto")],
                           num_outputs=2, seed=0, window=5)
    assert check["ok"] and check["exact_equals_ar"] == {"identical": 4, "rows": 4, "ties": []}
    assert check["greedy"] == {m: {"identical": 2, "rows": 2} for m in ("jacobi", "coupled", "exact", "gumbel w=auto")}
    assert format_lossless(check) == ("exact == ar token for token: yes (4/4 rows); "
                                      "greedy agreement with ar: 4/4 methods")


def test_a_method_that_changes_greedy_outputs_is_reported(image):
    check = check_lossless(image, ["red heart", "apple"], ["coupled", BROKEN], seed=0, window=5)
    assert not check["ok"] and check["greedy"]["broken"]["identical"] < 2 and check["greedy"]["coupled"]["identical"] == 2
    text = format_lossless(check)
    assert "LOSSLESS CHECK FAILED" in text and "broken at temperature 0 differs from ar" in text
    assert "greedy agreement with ar: 1/2 methods" in text


def test_exact_that_differs_from_ar_is_reported_and_given_outputs_are_reused(image):
    not_exact = image(["red heart"], method="coupled", seed=0, window=5)  # other draws than ar's
    check = check_lossless(image, ["red heart"], [], outputs={"exact": not_exact}, seed=0, window=5)
    assert check["exact_equals_ar"] == {"identical": 0, "rows": 1, "ties": []} and not check["ok"]
    assert "exact differs from ar on 1 of 1 rows" in format_lossless(check)


def test_an_ar_token_is_the_fp64_argmax_of_its_noisy_score(image):
    out = image(["red heart"], method="ar", seed=3)
    tokens = out.tokens[0]
    for i in (0, 7, 15):
        gaps = [score_gap(image, "red heart", 3, tokens, i, v) for v in range(image.target.vocab_size)]
        assert gaps[int(tokens[i])] == 0.0 and min(gaps) > -1e-6  # the chosen token wins, up to rounding


@pytest.mark.parametrize("gap, ok", [(-2e-6, True), (0.5, False)])
def test_exact_rows_that_differ_only_after_a_rounding_tie_pass(image, monkeypatch, gap, ok):
    not_exact = image(["red heart"], method="coupled", seed=0, window=5)
    monkeypatch.setattr(mmspec.lossless, "score_gap", lambda *args: gap)
    check = check_lossless(image, ["red heart"], [], outputs={"exact": not_exact}, seed=0, window=5)
    assert check["ok"] is ok and check["exact_equals_ar"]["identical"] == 0
    assert check["exact_equals_ar"]["ties"] == ([2e-6] if ok else [])
    assert ("1 more differing only after a rounding tie" in format_lossless(check)) is ok

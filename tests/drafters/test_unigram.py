"""Unigram drafts: a drafter that misreports its q caught. (Its law, at a fixed and a changing window, is checked with
every registered method's by tests/test_distribution.py, whose lists are read from the registry.)"""
import torch

import mmspec
from mmspec.drafters.unigram import UnigramDrafter
from mmspec.steps import Draft
from mmspec.verify import RejectionVerifier
from test_distribution import ALPHA, SAMPLES, case
from tiny import chi_square_pvalue, sequence_id


def _pvalue(name, method, window=4):
    target, _, layout, sampling, law = case(name)
    g = mmspec.generate(target, torch.tensor([0]), layout, method=method, window=window, sampling=sampling,
                        seed=0, num_samples=SAMPLES)
    return chi_square_pvalue(sequence_id(g.tokens, target.vocab_size), law)


class DrawsTheMode(UnigramDrafter):
    """Wrong: drafts the row's most frequent token but reports the smoothed counts as its q."""

    def propose(self, state, window):
        draft = super().propose(state, window)
        if draft.q is None:
            return draft
        return Draft(draft.q.argmax(-1), draft.q, draft.onehot)


def test_the_test_catches_a_drafter_whose_q_is_not_the_law_it_draws_from():
    wrong = mmspec.Method("unigram-mode", lambda layout: DrawsTheMode(), RejectionVerifier())
    assert _pvalue("tabular-1d", wrong) < ALPHA


def test_unigram_drafts_follow_the_rows_counts():
    target, _, layout, sampling, _ = case("tabular-1d")
    greedy = mmspec.generate(target, torch.tensor([0]), layout, method="unigram", window=4, seed=1,
                             sampling=mmspec.Sampling(temperature=0), num_samples=3)
    assert torch.equal(greedy.tokens, mmspec.generate(target, torch.tensor([0]), layout, method="ar", seed=1,
                                                      sampling=mmspec.Sampling(temperature=0), num_samples=3).tokens)
    assert greedy.stats.accepted.sum() > 0  # its drafts pass where the row repeats itself

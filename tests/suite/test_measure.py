"""The measuring verifier: right numbers on a hand-made step, and the method's own tokens on a real generation."""
import math
from types import SimpleNamespace

import pytest
import torch

import mmspec
from mmspec.steps import Draft, Verdict
from benchmarks.suite.measure import MeasuringVerifier, entropy, generated, measured, tv_distance
from mmspec.methods import resolve_method
from tiny import tiny_gpt


def test_tv_and_entropy():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    assert tv_distance(p, p).tolist() == [0.0, 0.0]
    assert tv_distance(torch.tensor([1.0, 0, 0]), torch.tensor([0, 0.5, 0.5])).item() == 1.0
    assert tv_distance(torch.tensor([0.5, 0.5, 0]), torch.tensor([0, 0.5, 0.5])).item() == 0.5
    assert entropy(torch.full((4,), 0.25)).item() == pytest.approx(math.log(4))
    assert entropy(torch.tensor([1.0, 0.0])).item() == 0.0  # zeros left by top-k / top-p: 0 log 0 = 0


def _state(forced=(-1, -1, -1, -1)):
    """What the wrapper reads of a DecodeState: one row, window 4 at index 0 of an 8-token layout."""
    forced = torch.tensor([list(forced) + [-1] * 8])
    return SimpleNamespace(step=0, batch_size=1, length=8, active=torch.tensor([True]), forced=forced,
                           structural=lambda index: forced.gather(1, index))


def _step(q, p, onehot, accepted, forced=(-1, -1, -1, -1)):
    """One verify step of window 4 (3 drafts), with a stub verifier returning `accepted`."""
    V = p.shape[-1]
    draft = Draft(torch.zeros(1, 3, dtype=torch.long), q[None], torch.tensor([onehot]))
    verdict = Verdict(torch.zeros(1, 4, dtype=torch.long), torch.tensor([accepted]), torch.arange(4)[None])
    wrapper = MeasuringVerifier(lambda state, d, logp, L: verdict)
    assert wrapper(_state(forced), draft, p.log()[None].expand(1, 4, V).clone(), 4) is verdict
    return wrapper.summary(), wrapper


def test_tv_is_zero_where_q_is_p_and_counts_only_carried_drafts():
    p = torch.tensor([0.2, 0.3, 0.5])
    far = torch.tensor([1.0, 0.0, 0.0])
    s, wrapper = _step(torch.stack([p, far, far]), p, onehot=[False, False, True], accepted=[True, False, True])
    assert s["tv"][:2] == pytest.approx([0.0, 0.8], abs=1e-6) and s["tv"][2] is None  # slot 2 is one-hot
    assert s["expected"][0] == pytest.approx(1.0, abs=1e-6) and s["carried_share"] == [1.0, 1.0, 0.0]
    assert s["carried_pass"][:2] == [1.0, 0.0] and s["draft_pass"] == [1.0, 0.0, 1.0]
    # committed: slot 0 (accepted) and slot 1 (its correction); slot 2 passed its test but is past the rejection
    assert s["counts"]["committed"] == [1.0, 1.0, 0.0, 0.0]
    assert s["entropy"][0] == pytest.approx(entropy(p).item()) and s["entropy"][2] is None
    assert [f.tolist() for f in wrapper.free] == [[[True] * 8]]


def test_forced_slots_are_neither_drafts_nor_generated_tokens():
    p = torch.tensor([0.2, 0.3, 0.5])
    s, wrapper = _step(torch.stack([p, p, p]), p, onehot=[True, False, False], accepted=[True, True, False],
                       forced=(5, 5, -1, -1))  # slots 0 and 1 given: the loop forces their drafts (one-hot)
    assert s["counts"]["drafted"] == [0.0, 0.0, 1.0] and s["counts"]["committed"] == [0.0, 0.0, 1.0, 0.0]
    assert wrapper.free[0].tolist() == [[False, False] + [True] * 6]


def test_generated_forwards_leave_out_given_tokens_and_what_was_never_committed():
    # row 0: forward 0 commits 2 given tokens and nothing else, forward 1 two chosen ones, forward 2 one;
    # row 1: one token per forward, its last never committed (a stop ended the row)
    commit_step = torch.tensor([[0, 0, 1, 1, 2], [0, 1, 2, 3, -1]])
    free = torch.tensor([[False, False, True, True, True], [True] * 5])
    g = generated(commit_step, free)
    assert g["forwards"].tolist() == [2, 4] and g["tokens"].tolist() == [3, 4] and g["single"].tolist() == [1, 4]


def _generate(method, seed=0, rows=3):
    target = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=2, seed=0))
    return mmspec.generate(target, torch.arange(rows) % 4, mmspec.Grid2D(4, 4), method=method, window=6,
                           seed=[seed + i for i in range(rows)],  # (a class repeats: its rows need seeds of their own)
                           sampling=mmspec.Sampling(temperature=0.9, top_k=12, cfg_scale=2.5))


@pytest.mark.parametrize("name", ["ar", "jacobi", "coupled", "gumbel", "exact", "lookup"])
def test_the_wrapper_does_not_change_the_tokens(name):
    plain, method = _generate(name), measured(resolve_method(name))
    wrapped = _generate(method)
    assert torch.equal(plain.tokens, wrapped.tokens) and torch.equal(plain.stats.nfe, wrapped.stats.nfe)
    g = generated(wrapped.stats.commit_step, torch.cat(method.verifier.free))
    assert g["tokens"].tolist() == [16] * 3
    assert torch.equal(g["forwards"], plain.stats.nfe)  # nothing is given here: every forward counts
    if name == "exact":
        assert torch.equal(wrapped.tokens, _generate("ar").tokens)


def test_carried_drafts_pass_at_one_minus_tv_under_maximal_coupling():
    """Rejection sampling accepts a draft x ~ q against p with probability 1 - TV(q, p): what the wrapper
    measures must agree with what it predicts, within sampling noise (4 sigma over a few thousand drafts)."""
    method = measured(resolve_method("coupled"))
    _generate(method, rows=48)
    s, counts = method.verifier.summary(), method.verifier.sums
    n = float(counts["carried"].sum())
    expected, passed = 1 - s["mean_tv"], float(counts["carried_passed"].sum()) / n
    assert n > 1000 and 0.05 < expected < 0.95
    assert abs(passed - expected) < 4 * math.sqrt(expected * (1 - expected) / n)

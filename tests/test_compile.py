"""compile=True: the verify step (target forward, p, verification, commit) traces whole, with fullgraph=True,
for every method; compiled it gives the same tokens, `exact` stays `ar`, and the laws hold.

Tracing is what these tests check for most methods (backend "eager": dynamo's graph, run eagerly), since a
graph break or a device read is what would make a compiled step fail or fall back; one test runs inductor's
generated code end to end, and the law tests run "aot_eager", whose functionalised graph replays every
in-place write (the cache, the committed tokens, the random streams' counters) the way inductor does.
"""
import dataclasses

import pytest
import torch

import mmspec
from mmspec.verify import RejectionVerifier
from test_distribution import ALPHA, case
from tiny import chi_square_pvalue, sequence_id, tiny_gpt, tiny_head

SAMPLING = mmspec.Sampling(temperature=0.9, top_k=12, cfg_scale=2.5)
LAYOUT = mmspec.Grid2D(3, 4, row_end_token=15)  # structural tokens: forced drafts and p, widened windows
METHODS = ["ar", "jacobi", "coupled", "gumbel", "exact", "lookup", "draft-model", "pac",
           {"name": "exact", "proactive": [3, 2]}, {"name": "draft-model", "proactive": [3, 2]},
           {"name": "eagle"}, {"name": "eagle", "exact": True, "jacobi": 2}, {"name": "eagle", "proactive": [3, 2]},
           {"name": "eagle", "tree": [6, 3]}]


def _target(seed=0):
    return mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, n_layer=1, seed=seed))


def _method(method):
    if method == "draft-model" or isinstance(method, dict) and method["name"] == "draft-model":
        return {**({"name": method} if isinstance(method, str) else method), "model": _target(seed=3)}
    if isinstance(method, dict) and method["name"] == "eagle":  # the target forward inside the step keeps its features
        return {**method, "head": tiny_head(16, 24, layers=(0, 1), rope_axes=2, seed=3, dtype=torch.float64)}
    return method


def _run(method, compile=False, layout=LAYOUT, window=5):
    return mmspec.generate(_target(), torch.tensor([0, 3]), layout, method=_method(method), window=window,
                           sampling=SAMPLING, seed=0, num_samples=2, compile=compile)


@pytest.mark.parametrize("method", METHODS, ids=str)
def test_every_methods_step_traces_whole_and_gives_the_same_tokens(method):
    eager, traced = _run(method), _run(method, compile={"backend": "eager"})
    assert torch.equal(traced.tokens, eager.tokens)
    assert torch.equal(traced.stats.nfe, eager.stats.nfe)
    assert torch.equal(traced.stats.commit_step, eager.stats.commit_step)


class ReadsTheDevice(RejectionVerifier):
    """Wrong for a compiled step: decides on a value read back from the device."""

    def __call__(self, state, draft, logp, L):
        if logp.max() > 0:
            raise AssertionError("log p is never positive")
        return super().__call__(state, draft, logp, L)


def test_a_step_that_reads_the_device_is_an_error_not_a_silent_slowdown():
    wrong = dataclasses.replace(mmspec.methods.coupled(), verifier=ReadsTheDevice())
    assert torch.equal(_run(wrong).tokens, _run("coupled").tokens)  # eager, it runs
    with pytest.raises(Exception, match="(?i)graph break|data-dependent|fullgraph"):
        _run(wrong, compile={"backend": "eager"})


def test_compiled_exact_equals_ar_with_inductor():
    layout = mmspec.Grid2D(4, 4)
    ar = _run("ar", layout=layout)
    got = _run("exact", compile=True, layout=layout, window=4)
    assert torch.equal(got.tokens, ar.tokens)
    assert got.stats.nfe.sum() < ar.stats.nfe.sum()


@pytest.mark.parametrize("method", ["coupled", "pac", "exact", "eagle"], ids=str)
def test_compiled_methods_match_the_exact_law(method):
    target, _, layout, sampling, law = case("gpt-grid")
    if method == "eagle":  # the head reads the features the compiled forward kept (functionalised by aot_eager)
        method = {"name": "eagle", "head": tiny_head(4, 24, rope_axes=2, seed=3)}
    g = mmspec.generate(target, torch.tensor([0]), layout, method=method, window=4, sampling=sampling, seed=0,
                        num_samples=20_000, compile={"backend": "aot_eager"})
    pvalue = chi_square_pvalue(sequence_id(g.tokens, target.vocab_size), law)
    assert pvalue > ALPHA, f"compiled {method}: chi-square p = {pvalue:.2e}"


def test_the_compiled_law_test_has_power_against_a_stream_that_repeats_its_draws(monkeypatch):
    """If the compiled step dropped the random streams' counter update (a side effect outside the graph's
    tensors), every step would reuse the same uniforms: the law test must see it."""
    from mmspec.rng import Streams

    draw = Streams.uniform

    def repeating(self, *shape):
        drawn = self._drawn
        u = draw(self, *shape)
        self._drawn = drawn  # the counter never moves
        return u

    monkeypatch.setattr(Streams, "uniform", repeating)
    target, _, layout, sampling, law = case("gpt-grid")
    g = mmspec.generate(target, torch.tensor([0]), layout, method="coupled", window=4, sampling=sampling, seed=0,
                        num_samples=20_000, compile={"backend": "aot_eager"})
    assert chi_square_pvalue(sequence_id(g.tokens, target.vocab_size), law) < ALPHA

"""The Cosmos target: its sessions give the reference forward's logits, exact equals ar with given frames, and the
speculative methods keep the exact law with given tokens and with a text condition."""
import pytest
import torch

import mmspec
from mmspec.adapters.cosmos import CosmosTarget
from tiny import chi_square_pvalue, cosmos_law, sequence_id, tiny_cosmos

SAMPLES = 20_000
ALPHA = 1e-3
COSMOS = mmspec.Sampling(temperature=1.0, top_p=0.8)  # Cosmos's own default sampling


def _given(model, frames: int = 1, rows: int = 1, seed: int = 0) -> torch.Tensor:
    """The first `frames` latent frames given (random tokens), the rest generated."""
    N, per_frame = model.layout.length, model.layout.h * model.layout.w
    given = torch.full((rows, N), -1)
    given[:, : frames * per_frame] = torch.randint(0, model.config.vocab_size, (rows, frames * per_frame),
                                                   generator=torch.Generator().manual_seed(seed))
    return given


@pytest.mark.parametrize("video2world", [False, True], ids=["base", "video2world"])
def test_a_session_gives_the_reference_forwards_logits_in_windows(video2world):
    model = tiny_cosmos(video2world)
    tokens = torch.randint(0, 8, (2, 12))
    context = torch.randn(2, 5, 12, dtype=torch.float64) if video2world else None
    with torch.no_grad():
        want = model.forward_sequence(tokens, context)  # [2, 12, V], row i predicting token i
    session = CosmosTarget(model).session(context, model.layout, cfg=False, num_samples=1 if video2world else 2,
                                          max_window=5)
    inputs = torch.cat([torch.full((2, 1), -1), tokens], 1)  # index -1, then tokens 0..11
    start = 0
    for width in (3, 5, 1, 3):  # windows over indices start-1 .. start+width-2, predicting start .. start+width-1
        logits, _ = session.forward(inputs[:, start:start + width], torch.full((2,), start - 1))
        first = 1 if start == 0 and not video2world else 0  # a base model has no logits for token 0
        torch.testing.assert_close(logits[:, first:], want[:, start + first:start + width], rtol=1e-10, atol=1e-10)
        start += width


@pytest.mark.parametrize("video2world", [False, True], ids=["base", "video2world"])
@pytest.mark.parametrize("method", ["exact", {"name": "exact", "init": "prev-frame"}, "pac"], ids=str)
def test_exact_equals_ar_token_for_token_with_given_frames(video2world, method):
    model = tiny_cosmos(video2world, dtype=torch.float32)
    target, rows = CosmosTarget(model), 3
    context = torch.randn(1, 5, 12) if video2world else None
    given = _given(model, rows=rows)
    kw = dict(sampling=COSMOS, seed=5, given=given, num_outputs=rows)
    ar = mmspec.generate(target, context, model.layout, method="ar", **kw)
    for window in (4, 16):
        spec = mmspec.generate(target, context, model.layout, method=method, window=window, **kw)
        if method == "pac":  # pac keeps the law, not AR's draws: its given frames stay, bit for bit
            assert torch.equal(spec.tokens[:, :4], given[:, :4])
            continue
        assert torch.equal(spec.tokens, ar.tokens)
    assert torch.equal(ar.tokens[:, :4], given[:, :4])  # the given latent frame, bit for bit


LAW_CASES = {}


def _law_case(kind):
    """given: a base model, first latent frame given, 4 tokens of 3 codes to draw; cross: a Video2World model with a
    text condition, all 4 tokens drawn from <bov> on."""
    if kind not in LAW_CASES:
        if kind == "given":
            model = tiny_cosmos(vocab=3, latent_shape=(3, 1, 2), seed=3, dtype=torch.float32, spread=0.2)
            given = {0: 2, 1: 0}
            condition, law = None, cosmos_law(model, COSMOS, given=given)
        else:
            model = tiny_cosmos(True, vocab=3, latent_shape=(2, 1, 2), seed=4, dtype=torch.float32, spread=0.2)
            given, condition = {}, torch.randn(1, 5, 12, generator=torch.Generator().manual_seed(0))
            law = cosmos_law(model, COSMOS, context=condition.double())
        LAW_CASES[kind] = model, given, condition, law
    return LAW_CASES[kind]


def _sample(model, given, condition, method):
    g = torch.full((1, model.layout.length), -1)
    for i, t in given.items():
        g[0, i] = t
    out = mmspec.generate(CosmosTarget(model), condition, model.layout, method=method, window=4, sampling=COSMOS,
                          seed=0, num_outputs=SAMPLES, given=g if given else None)
    return out.tokens


@pytest.mark.parametrize("kind", ["given", "cross"])
@pytest.mark.parametrize("method", ["coupled", "pac"])
def test_speculation_keeps_the_exact_law(kind, method):
    model, given, condition, law = _law_case(kind)
    tokens = _sample(model, given, condition, method)
    pvalue = chi_square_pvalue(sequence_id(tokens, 3), law)
    assert pvalue > ALPHA, f"{method} on a tiny Cosmos ({kind}): chi-square p = {pvalue:.2e}"


@pytest.mark.parametrize("method", ["coupled", "pac"])
def test_the_law_test_catches_given_tokens_the_model_does_not_see(method):
    """Drawing without the given latent frame and writing it in afterwards is another law."""
    model, given, condition, law = _law_case("given")
    tokens = _sample(model, {0: 2}, condition, method)  # token 1 drawn, then overwritten
    tokens[:, 1] = given[1]
    assert chi_square_pvalue(sequence_id(tokens, 3), law) < ALPHA


@pytest.mark.parametrize("method", ["coupled", "pac"])
def test_the_law_test_catches_a_text_condition_not_the_one_asked_for(method):
    model, given, condition, law = _law_case("cross")
    tokens = _sample(model, given, torch.randn(1, 5, 12, generator=torch.Generator().manual_seed(1)), method)
    assert chi_square_pvalue(sequence_id(tokens, 3), law) < ALPHA


def test_a_session_refuses_what_cosmos_cannot_run():
    base, v2w = CosmosTarget(tiny_cosmos()), CosmosTarget(tiny_cosmos(True))
    layout = base.model.layout
    with pytest.raises(ValueError, match="cannot run CFG"):
        base.session(None, layout, cfg=True)
    with pytest.raises(ValueError, match="takes no condition"):
        base.session(torch.zeros(1, 5, 12), layout, cfg=False)
    with pytest.raises(ValueError, match="needs its text condition"):
        v2w.session(None, layout, cfg=False)
    with pytest.raises(ValueError, match=r"text features must be \[B, S, 12\]"):
        v2w.session(torch.zeros(1, 5, 7), layout, cfg=False)
    with pytest.raises(ValueError, match="generates Grid3D"):
        base.session(None, mmspec.Grid3D(3, 4, 4), cfg=False)


def _first_position_for_the_whole_window(self, h, positions, view):
    """A windowing bug: every drafted position rotated (and embedded) as the window's first."""
    first = positions[:, :1].expand_as(positions)
    absolute = None if self.absolute is None else self.absolute[first]
    return self.model(h, self.cos[first], self.sin[first], absolute, view, self.context)


@pytest.mark.parametrize("kind", ["given", "cross"])
@pytest.mark.parametrize("method", ["coupled", "pac"])
def test_the_law_test_catches_drafts_verified_at_the_wrong_positions(kind, method, monkeypatch):
    from mmspec.adapters.cosmos import CosmosSession

    model, given, condition, law = _law_case(kind)
    monkeypatch.setattr(CosmosSession, "logits", _first_position_for_the_whole_window)
    assert chi_square_pvalue(sequence_id(_sample(model, given, condition, method), 3), law) < ALPHA


@pytest.mark.parametrize("video2world", [False, True], ids=["base", "video2world"])
def test_the_cosmos_step_traces_whole_and_gives_the_same_tokens(video2world):
    """What compile=True needs (dynamo's graph of the step, run eagerly: `fullgraph=True` fails on any break)."""
    model = tiny_cosmos(video2world, dtype=torch.float32)
    context = torch.randn(1, 5, 12) if video2world else None
    kw = dict(method="exact", window=5, sampling=COSMOS, seed=2, given=_given(model))
    eager = mmspec.generate(CosmosTarget(model), context, model.layout, **kw)
    traced = mmspec.generate(CosmosTarget(model), context, model.layout, compile={"backend": "eager"}, **kw)
    assert torch.equal(traced.tokens, eager.tokens) and torch.equal(traced.stats.nfe, eager.stats.nfe)


@pytest.mark.skipif(not torch.cuda.is_available(), reason=(
    "needs a CUDA GPU (torch.cuda.is_available() is False here): exact == ar for Cosmos with bf16 weights on CUDA, "
    "eager and compiled; benchmarks/gpu.sh runs it"))
@pytest.mark.parametrize("video2world, compile", [(False, False), (True, False), (False, True)],
                         ids=["base", "video2world", "base-compiled"])
def test_exact_equals_ar_on_cuda_with_bf16_weights(video2world, compile):
    model = tiny_cosmos(video2world, dtype=torch.bfloat16).float().cuda()  # bf16 values, computed in fp32
    context = torch.randn(1, 5, 12, device="cuda") if video2world else None
    kw = dict(sampling=COSMOS, seed=3, given=_given(model, rows=4), num_outputs=4, compile=compile)
    ar = mmspec.generate(CosmosTarget(model), context, model.layout, method="ar", **kw)
    exact = mmspec.generate(CosmosTarget(model), context, model.layout, method="exact", window=16, **kw)
    assert ar.tokens.is_cuda and torch.equal(exact.tokens, ar.tokens)

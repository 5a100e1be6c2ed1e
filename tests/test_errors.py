"""Bad input gets a clear error, never a silent wrong result."""
import pytest
import torch

import mmspec
from tiny import TabularTarget, tiny_gpt


@pytest.fixture
def target():
    return mmspec.ReferenceTarget(tiny_gpt())


def gen(target, layout=None, **kw):
    return mmspec.generate(target, torch.tensor([0]), layout or mmspec.Grid2D(3, 3), **kw)


def test_unknown_method(target):
    with pytest.raises(ValueError, match="unknown method 'speculate'.*coupled"):
        gen(target, method="speculate")
    with pytest.raises(ValueError, match="bad options"):
        gen(target, method={"name": "coupled", "windo": 3})
    with pytest.raises(ValueError, match="unknown fill policy 'diagonal'"):
        gen(target, method={"name": "jacobi", "init": "diagonal"})
    with pytest.raises(ValueError, match="needs a draft model"):
        gen(target, method="draft-model")


def test_cfg_without_a_null_condition():
    target = TabularTarget(3, 4, null=False)
    with pytest.raises(ValueError, match="null condition"):
        mmspec.generate(target, torch.tensor([0]), mmspec.Sequence1D(4), sampling={"cfg_scale": 3.0})


def test_wrong_layout(target):
    with pytest.raises(ValueError, match="position axes"):
        gen(target, mmspec.Sequence1D(9))
    with pytest.raises(ValueError, match="block_size"):
        gen(target, mmspec.Grid2D(9, 9))
    with pytest.raises(ValueError, match="table covers"):
        mmspec.generate(TabularTarget(3, 4), torch.tensor([0]), mmspec.Sequence1D(5))
    with pytest.raises(ValueError, match="positive int"):
        mmspec.Grid2D(0, 4)
    with pytest.raises(TypeError, match="layout must be"):
        mmspec.generate(target, torch.tensor([0]), (3, 3))


@pytest.mark.parametrize("window", [0, -1, 257, 2.5])
def test_window_out_of_range(target, window):
    with pytest.raises(ValueError, match="window must be"):
        gen(target, window=window)


def test_nan_logits_raise():
    model = tiny_gpt()
    with torch.no_grad():
        model.output.weight[3, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="NaN"):
        gen(mmspec.ReferenceTarget(model), method="coupled")


def test_bad_sampling_seed_and_condition(target):
    with pytest.raises(ValueError, match="unknown sampling options"):
        gen(target, sampling={"temp": 1.0})
    with pytest.raises(ValueError, match="top_p"):
        gen(target, sampling={"top_p": 1.5})
    with pytest.raises(ValueError, match="cfg_mode"):
        gen(target, sampling={"cfg_mode": "softmax"})
    with pytest.raises(ValueError, match="seeds for 2 rows"):
        gen(target, seed=[1, 2, 3], num_samples=2)
    with pytest.raises(ValueError, match="class condition"):
        mmspec.generate(target, torch.tensor([[0, 1]]), mmspec.Grid2D(3, 3))
    with pytest.raises(ValueError, match="class condition"):
        mmspec.generate(target, torch.tensor([9]), mmspec.Grid2D(3, 3))


def test_draft_model_with_another_vocabulary(target):
    other = mmspec.ReferenceTarget(tiny_gpt(vocab_size=8))
    with pytest.raises(ValueError, match="vocabulary"):
        gen(target, method={"name": "draft-model", "model": other})


@pytest.mark.parametrize("bad", [{"temperature": float("nan")}, {"cfg_scale": float("nan")},
                                 {"temperature": float("inf")}, {"cfg_scale": float("inf")}, {"temperature": -1.0},
                                 {"top_k": 2.5}, {"top_k": True}, {"top_p": float("nan")}, {"top_p": 0.0}])
def test_non_finite_or_ill_typed_sampling_is_refused(target, bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        gen(target, sampling=bad)


def test_a_window_policy_that_oversteps_is_refused(target):
    class TooWide:
        max_window = 4

        def start(self, session, state):
            pass

        def __call__(self, state):
            return 5

        def observe(self, state, k, seconds):
            pass

    with pytest.raises(ValueError, match="asked for 5 positions; it allows 1..4"):
        gen(target, window=TooWide())
    with pytest.raises(ValueError, match="window must be"):
        gen(target, window=lambda state: 3)  # a policy needs max_window

"""The lean Llama forward computes what transformers' own forward computes, on the same cache, masks and taps, and
only runs where it can."""
import pytest
import torch

from mmspec import HFCausalLM
from mmspec.adapters.llama import LeanLlama
from mmspec.layouts import Sequence1D
from mmspec.tree import proactive_tree
from tiny import BOI, BOS, tiny_janus, tiny_llama

PROMPTS = [[1, 5, 7, 9, 5, 7], [1, 3], [1, 8, 8, 2, 30]]  # left-padded: the cache masks the pads


def _sessions(target, prompts=PROMPTS, layout=Sequence1D(24), cfg=False, taps=()):
    """The same prompts opened twice: through transformers' forward and through the lean one."""
    assert target.lean is not None
    lean = target.session(prompts, layout, cfg=cfg, max_window=8)
    target.lean = None
    plain = target.session(prompts, layout, cfg=cfg, max_window=8)
    for s in (lean, plain):
        s.taps = taps
    return plain, lean


def _janus(dtype):
    from mmspec.adapters.janus import JanusImage

    target = JanusImage(tiny_janus(dtype=dtype))  # its language model is a LlamaModel: the lean forward's hidden state
    return _sessions(target, [[BOS, 10, 11, 12, BOI], [BOS, 20, 21, 5, 22, 23, 24, BOI], [BOS, 7, BOI]],
                     target.layout(), cfg=True, taps=(0, 1, 2))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("model", ["llama", "janus"])
def test_the_lean_forward_gives_transformers_logits_and_features(model, dtype):
    if model == "llama":
        plain, lean = _sessions(HFCausalLM(tiny_llama(dtype=dtype)), taps=(0, 1, 2))
    else:
        plain, lean = _janus(dtype)
    torch.manual_seed(0)
    start = torch.full((3,), -1)  # the first window starts with the prompt's last token (index -1)
    steps = [(4, None), (3, None), (5, proactive_tree(3, 1, 2, "cpu"))]  # windows, then a tree's mask
    for width, tree in steps:
        tokens = torch.randint(1, 40, (3, width))
        tokens = tokens % 12 if model == "janus" else tokens  # (Janus: image codes)
        for got, want in zip(lean.forward(tokens, start, tree), plain.forward(tokens, start, tree)):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-12 if dtype == torch.float64 else 1e-5)
        torch.testing.assert_close(lean.features, plain.features, rtol=0,
                                   atol=1e-12 if dtype == torch.float64 else 1e-5)
        start = start + torch.tensor([width - 1, width, 1])  # rows out of step: per-row slots and masks


def test_the_lean_forward_asks_for_layers_the_model_has():
    _, lean = _sessions(HFCausalLM(tiny_llama()), taps=(0, 5))
    with pytest.raises(ValueError, match="features of layers"):
        lean.forward(torch.ones(3, 2, dtype=torch.long), torch.full((3,), -1))


@pytest.mark.parametrize("change", ["attention_bias", "mlp_bias", "dynamic_rope", "gelu", "subclass"])
def test_models_it_does_not_know_keep_their_own_forward(change):
    from transformers import LlamaConfig, LlamaForCausalLM

    kw = dict(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4)
    if change in ("attention_bias", "mlp_bias"):
        kw[change] = True
    elif change == "dynamic_rope":
        kw["rope_parameters"] = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
    elif change == "gelu":
        kw["hidden_act"] = "gelu"
    cls = type("MyLlama", (LlamaForCausalLM,), {}) if change == "subclass" else LlamaForCausalLM
    model = cls(LlamaConfig(**kw)).eval()
    assert LeanLlama.of(model) is None and HFCausalLM(model).lean is None
    assert LeanLlama.of(LlamaForCausalLM(LlamaConfig(**{k: v for k, v in kw.items() if k in (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")})).eval())

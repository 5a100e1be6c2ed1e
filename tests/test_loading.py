"""Loaded models are laid out for decoding: Linear weights input-major in memory, layers that read one input fused
into one matrix, nothing else changed."""
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from mmspec import HFCausalLM
from mmspec.loading import GATE_UP, QKV, decode_layout, fused_product
from mmspec.reference.checkpoint import load_gpt, save_gpt
from mmspec.reference.eagle import load_head, save_head
from tiny import tiny_gpt, tiny_head, tiny_llama


def _input_major(w: torch.Tensor) -> bool:
    """[out, in] stored as rows of inputs: alone ([in, out]) or as columns of a fused matrix ([in, sum out])."""
    return w.stride()[0] == 1 and w.stride()[1] >= w.shape[0]


def test_a_loaded_gpt_computes_the_same_logits_and_saves_the_same_file(tmp_path):
    model = tiny_gpt(dtype=torch.float32)
    save_gpt(model, tmp_path / "gpt")
    loaded = load_gpt(tmp_path / "gpt")
    linears = [m.weight for m in loaded.modules() if isinstance(m, nn.Linear)]
    assert linears and all(_input_major(w) for w in linears)
    assert not any(_input_major(m.weight) for m in loaded.modules() if isinstance(m, nn.Embedding))
    for a, b in zip(linears, (m.weight for m in model.modules() if isinstance(m, nn.Linear))):
        x = torch.randn(3, 5, a.shape[1])
        assert torch.equal(a, b)
        torch.testing.assert_close(nn.functional.linear(x, a), nn.functional.linear(x, b))
    save_gpt(loaded, tmp_path / "again")  # a decode-laid-out model saves as any other
    first, again = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("gpt", "again"))
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)


def test_a_loaded_head_is_laid_out_and_saves_unchanged(tmp_path):
    head = tiny_head(40, 32)
    save_head(head, tmp_path / "head", dtype=None)
    loaded = load_head(tmp_path / "head", target_layers=2)
    assert _input_major(loaded.lm_head.weight) and _input_major(loaded.midlayer.self_attn.q_proj.weight)
    save_head(loaded, tmp_path / "again", dtype=None)
    first, again = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("head", "again"))
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_a_transformers_model_keeps_tied_output_weights_row_major(tmp_path):
    model = tiny_llama(dtype=torch.float32)
    model.config.tie_word_embeddings = True
    model.tie_weights()
    model.save_pretrained(tmp_path / "llama", safe_serialization=True)
    loaded = HFCausalLM.from_pretrained(tmp_path / "llama").model
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    assert loaded.lm_head.weight.is_contiguous()  # an embedding looks its rows up
    assert _input_major(loaded.model.layers[0].self_attn.q_proj.weight)
    ids = torch.tensor([[1, 5, 7, 9]])
    torch.testing.assert_close(loaded(ids).logits, model(ids).logits)


def _group_product(module, group, x):
    return torch.cat([nn.functional.linear(x, getattr(module, name).weight) for name in group], -1)


def test_layers_that_read_one_input_become_one_matrix_and_save_as_before(tmp_path):
    """q, k, v and gate, up of a transformers Llama (the reference GPT's w1, w3 and a head's q, k, v alike): one
    storage, each weight a view of it; products, state_dict and saved files as before fusing."""
    model = tiny_llama(dtype=torch.float32)
    model.save_pretrained(tmp_path / "llama", safe_serialization=True)
    loaded = HFCausalLM.from_pretrained(tmp_path / "llama").model
    x = torch.randn(3, 32)
    for layer in loaded.model.layers:
        for module, group in ((layer.self_attn, QKV), (layer.mlp, GATE_UP)):
            weights = [getattr(module, name).weight for name in group]
            assert len({w.untyped_storage().data_ptr() for w in weights}) == 1
            with torch.no_grad():  # (a step that records gradients multiplies each weight)
                torch.testing.assert_close(fused_product(module, group, x), _group_product(module, group, x))
    assert all(w.untyped_storage().data_ptr() != loaded.model.layers[0].self_attn.q_proj.weight.untyped_storage().data_ptr()
               for name, w in loaded.state_dict().items() if not name.startswith("model.layers.0.self_attn.q_proj"))
    loaded.save_pretrained(tmp_path / "again", safe_serialization=True)  # no tensors sharing storage to refuse
    first, again = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("llama", "again"))
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    gpt, head = load_gpt(_saved(save_gpt, tiny_gpt(dtype=torch.float32), tmp_path / "gpt")), \
        load_head(_saved(lambda m, p: save_head(m, p, dtype=None), tiny_head(40, 32), tmp_path / "head"), target_layers=2)
    for module, group in ((gpt.layers[0].feed_forward, ("w1", "w3")), (head.midlayer.self_attn, ("q_proj", "k_proj", "v_proj"))):
        assert "_fused" in module.__dict__ and group in module.__dict__["_fused"]


def _saved(save, model, path):
    save(model, path)
    return path


def test_a_fused_group_whose_weights_moved_or_changed_multiplies_each_weight():
    """After `.to()` or a weight set anew, the layers no longer share the fused storage: their own weights count."""
    mlp = tiny_llama(dtype=torch.float32).model.layers[0].mlp
    decode_layout(mlp)
    x = torch.randn(2, 32)
    mlp.up_proj.weight = nn.Parameter(torch.randn_like(mlp.up_proj.weight))
    attn = decode_layout(tiny_llama(dtype=torch.float32).model.layers[0].self_attn).to(torch.float64)
    y = torch.randn(2, 32, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(fused_product(mlp, GATE_UP, x), _group_product(mlp, GATE_UP, x))
        out = fused_product(attn, QKV, y)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, _group_product(attn, QKV, y))


def test_a_product_that_records_gradients_reaches_each_fused_weight():
    """Training a loaded model: the fused matrix is not a parameter, so the product must go through the weights."""
    mlp = decode_layout(tiny_llama(dtype=torch.float32).model.layers[0].mlp)
    x = torch.randn(2, 32)
    fused_product(mlp, GATE_UP, x).square().sum().backward()
    expected = [torch.autograd.grad(_group_product(mlp, GATE_UP, x).square().sum(), w)[0]
                for w in (mlp.gate_proj.weight, mlp.up_proj.weight)]
    for w, grad in zip((mlp.gate_proj.weight, mlp.up_proj.weight), expected):
        torch.testing.assert_close(w.grad, grad)


def test_weights_off_the_cpu_or_not_fp32_are_left_alone():
    for layer in (nn.Linear(4, 6, device="meta"), nn.Linear(4, 6, dtype=torch.float16),
                  nn.Linear(4, 6, dtype=torch.bfloat16), nn.Linear(4, 6, dtype=torch.float64)):
        decode_layout(layer)
        assert layer.weight.is_contiguous()
    assert _input_major(decode_layout(nn.Linear(4, 6)).weight)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_cuda_model_is_left_alone():
    layer = decode_layout(nn.Linear(4, 6).cuda())
    assert layer.weight.is_contiguous()


def test_loading_a_transformers_model_prints_no_progress_bar_and_keeps_the_callers_setting(tmp_path, capsys):
    from transformers.utils import logging as hf_logging

    tiny_llama(dtype=torch.float32).save_pretrained(tmp_path / "llama", safe_serialization=True)
    capsys.readouterr()
    hf_logging.enable_progress_bar()  # (transformers' default)
    HFCausalLM.from_pretrained(tmp_path / "llama")
    assert "Loading weights" not in capsys.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # the caller's setting is back

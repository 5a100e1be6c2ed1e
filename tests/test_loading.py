"""Loaded models are laid out for decoding: Linear weights input-major in memory with a row-major copy for products
of a few rows, layers that read one input fused into one matrix, nothing else changed."""
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from mmspec import HFCausalLM
import mmspec.loading
from mmspec.loading import FEW_ROWS, GATE_UP, QKV, decode_layout, fused_product, product
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


def _rows_read_the_copy(multiply, copy: torch.Tensor, inputs: int) -> list[int]:
    """The row counts whose product changes when the row-major copy is spoilt: those that read it."""
    xs = {rows: torch.randn(rows, inputs) for rows in (1, 2, 5, 8, 9, 16)}
    with torch.no_grad():
        before = {rows: multiply(x) for rows, x in xs.items()}
        saved = copy.clone()
        copy.mul_(2)
        after = {rows: multiply(x) for rows, x in xs.items()}
        copy.copy_(saved)
    return [rows for rows in xs if not torch.equal(before[rows], after[rows])]


@pytest.fixture
def row_major_pays(monkeypatch):
    """A machine where products of a few rows are faster row-major (the test's own may be either)."""
    monkeypatch.setattr(mmspec.loading, "row_major_pays", lambda weights: True)


def test_products_of_a_few_rows_read_the_row_major_copy_and_equal_the_weights_product(row_major_pays):
    """One row (an AR step) reads the input-major weight, 2-8 rows (a window, a batch) the row-major copy, more rows the
    weight again; every one of them is the weight's product."""
    mlp = decode_layout(tiny_llama(dtype=torch.float32).model.layers[0].mlp)
    down, (_, _, fused) = mlp.down_proj.__dict__["_rows"], mlp.__dict__["_fused"][GATE_UP]
    assert down.weight.is_contiguous() and fused.weight.is_contiguous()
    assert FEW_ROWS == (2, 8)
    assert _rows_read_the_copy(lambda x: product(mlp.down_proj, x), down.weight, mlp.down_proj.in_features) == [2, 5, 8]
    assert _rows_read_the_copy(lambda x: fused_product(mlp, GATE_UP, x), fused.weight, 32) == [2, 5, 8]
    with torch.no_grad():
        for rows in (1, 2, 5, 16):
            x, y = torch.randn(rows, 32), torch.randn(rows, mlp.down_proj.in_features)
            torch.testing.assert_close(fused_product(mlp, GATE_UP, x), _group_product(mlp, GATE_UP, x))
            torch.testing.assert_close(product(mlp.down_proj, y), nn.functional.linear(y, mlp.down_proj.weight))
    assert not any("_rows" in name for name in mlp.state_dict())


def test_a_weight_changed_in_place_set_anew_or_moved_is_multiplied_as_it_is_now(row_major_pays):
    """load_state_dict and copy_ change weights in place (same storage), an assignment sets a new one, .to() moves it:
    the row-major copy follows each of them."""
    mlp = decode_layout(tiny_llama(dtype=torch.float32).model.layers[0].mlp)
    x, y = torch.randn(4, 32), torch.randn(4, mlp.down_proj.in_features)

    def check():
        with torch.no_grad():
            torch.testing.assert_close(fused_product(mlp, GATE_UP, x), _group_product(mlp, GATE_UP, x))
            torch.testing.assert_close(product(mlp.down_proj, y), nn.functional.linear(y, mlp.down_proj.weight))

    check()  # (the copies are made and read once before each change)
    mlp.load_state_dict({k: torch.randn_like(v) for k, v in mlp.state_dict().items()})
    check()
    with torch.no_grad():
        mlp.gate_proj.weight.copy_(torch.randn_like(mlp.gate_proj.weight))
        mlp.down_proj.weight.mul_(3)
    check()
    mlp.down_proj.weight = nn.Parameter(torch.randn_like(mlp.down_proj.weight))
    check()
    mlp.to(torch.float64)
    x, y = x.double(), y.double()
    check()


def test_a_compiled_step_multiplies_the_weights_with_no_graph_break(row_major_pays):
    """Where copies exist, a compiled product (fullgraph) must not reach the thread count or the copies' stamps: the
    same products at 1, 4 and 16 rows compile and equal eager ones (CI's host made copies; this host may not)."""
    mlp = decode_layout(tiny_llama(dtype=torch.float32).model.layers[0].mlp)
    assert mlp.down_proj.__dict__["_rows"] is not None

    def step(x):  # [R, 32] -> [R, 32]
        gate, up = fused_product(mlp, GATE_UP, x).split(mlp.gate_proj.out_features, -1)
        return product(mlp.down_proj, nn.functional.silu(gate) * up)

    compiled = torch.compile(step, fullgraph=True, backend="eager", dynamic=False)
    with torch.no_grad():
        for rows in (1, 4, 16):
            x = torch.randn(rows, 32)
            torch.testing.assert_close(compiled(x), step(x))


def test_no_row_major_copies_where_they_do_not_pay_or_past_the_budget(monkeypatch, row_major_pays):
    monkeypatch.setattr(mmspec.loading, "ROW_COPY_BYTES", 4 * 32 * 64)  # down_proj [32, 64] fits, gate and up do not
    mlp = decode_layout(tiny_llama(dtype=torch.float32).model.layers[0].mlp)
    assert mlp.down_proj.__dict__["_rows"] is not None and mlp.__dict__["_fused"][GATE_UP][2] is None
    x = torch.randn(4, 32)
    with torch.no_grad():
        torch.testing.assert_close(fused_product(mlp, GATE_UP, x), _group_product(mlp, GATE_UP, x))
    monkeypatch.setattr(mmspec.loading, "ROW_COPY_BYTES", 1 << 30)
    monkeypatch.setattr(mmspec.loading, "row_major_pays", lambda weights: False)
    mlp = decode_layout(tiny_llama(dtype=torch.float32).model.layers[0].mlp)
    assert mlp.down_proj.__dict__["_rows"] is None and mlp.__dict__["_fused"][GATE_UP][2] is None
    with torch.no_grad():
        torch.testing.assert_close(fused_product(mlp, GATE_UP, x), _group_product(mlp, GATE_UP, x))


def test_row_major_pays_is_timed_on_the_models_own_shape_after_reading_its_weights(monkeypatch):
    """The probe multiplies a weight of the shape that holds most of the model's bytes, after a pass over up to
    FLUSH_BYTES of the model's own weights; timed once per thread count, shape and bytes read."""
    monkeypatch.setattr(mmspec.loading, "_row_major_pays", {})
    monkeypatch.setattr(mmspec.loading, "FLUSH_BYTES", 4 * 64 * 48 * 2)  # two of the three [64, 48] weights
    weights = [torch.randn(64, 48), torch.randn(16, 48), torch.randn(64, 48), torch.randn(64, 48)]
    shapes, reads = [], []
    linear = mmspec.loading.F.linear
    monkeypatch.setattr(mmspec.loading.F, "linear", lambda x, w: shapes.append(tuple(w.shape)) or linear(x, w))
    for i, w in enumerate(weights):
        monkeypatch.setattr(w, "sum", lambda i=i: reads.append(i))
    first = mmspec.loading.row_major_pays(weights)
    assert isinstance(first, bool) and set(shapes) == {(64, 48)} and len(shapes) == 2 + 2 * 3 * 5  # warm-up, timed
    assert reads == [0, 1, 2] * 30  # the weights read before each timed product: up to FLUSH_BYTES, in order
    assert mmspec.loading.row_major_pays(weights) is first and len(shapes) == 32
    assert mmspec.loading._row_major_pays == {(torch.get_num_threads(), (64, 48), 4 * 48 * (64 + 16 + 64)): first}
    assert mmspec.loading.row_major_pays([]) is False


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

"""The reference Cosmos-1 AR transformer: checkpoints in and out, strict loading, its positions."""
import json
import math

import pytest
import torch

from mmspec.loading import decode_layout
from mmspec.reference.cosmos import Cosmos, inverse_frequencies, rope_angles
from mmspec.reference.cosmos_checkpoint import convert_cosmos, cosmos_config, load_cosmos, save_cosmos
from tiny import script_tokenizer, tiny_cosmos


def _released(model, file):
    """model as NVIDIA ships it: a pickle of {"model": state dict}, keys prefixed "model.", TransformerEngine's
    "_extra_state" entries beside them."""
    sd = {f"model.{k}": v for k, v in model.state_dict().items()}
    sd["model.layers.0.attention.wq._extra_state"] = torch.zeros(0)
    torch.save({"model": sd}, file)


@pytest.mark.parametrize("video2world", [False, True], ids=["base", "video2world"])
def test_logits_are_unchanged_through_save_convert_and_load(tmp_path, video2world):
    model = decode_layout(tiny_cosmos(video2world, dtype=torch.float32))  # laid out as a loaded model is
    seq = torch.randint(0, 8, (2, 12))
    context = torch.randn(2, 5, 12) if video2world else None
    if video2world:
        seq[:, 0] = model.config.bov_token
    with torch.no_grad():
        before = model.forward_reference(seq, context)
        _released(model, tmp_path / "model.pt")
        convert_cosmos(tmp_path / "model.pt", tmp_path / "converted", allow_pickle=True, model=model.config)
        save_cosmos(model, tmp_path / "saved")
        for folder in ("converted", "saved"):
            assert torch.equal(load_cosmos(tmp_path / folder).forward_reference(seq, context), before)


def test_a_pickle_is_read_only_when_allowed(tmp_path):
    model = tiny_cosmos()
    _released(model, tmp_path / "model.pt")
    with pytest.raises(ValueError, match="is a pickle; pass --allow-pickle"):
        convert_cosmos(tmp_path / "model.pt", tmp_path / "out", model=model.config)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("change", ["missing", "unexpected", "shape"])
def test_checkpoints_load_strictly(tmp_path, change):
    model = tiny_cosmos()
    sd = {f"model.{k}": v for k, v in model.state_dict().items()}
    if change == "missing":
        del sd["model.layers.1.attention.k_norm.weight"]
    elif change == "unexpected":
        sd["model.layers.0.cross_attention.wq.weight"] = torch.zeros(24, 24)
    else:
        sd["model.output.weight"] = torch.zeros(9, 24)
    torch.save({"model": sd}, tmp_path / "model.pt")
    with pytest.raises(ValueError, match="do not match the config"):
        convert_cosmos(tmp_path / "model.pt", tmp_path / "out", allow_pickle=True, model=model.config)


def test_released_configs_have_cosmos_parameter_names_and_sizes():
    """The 5B is the 4B with a cross-attention in every layer, a 64064-row embedding (<bov>) and 64000 outputs."""
    with torch.device("meta"):
        models = {name: Cosmos(cosmos_config(name)) for name in ("4b", "5b", "12b", "13b")}
    sd = models["5b"].state_dict()
    for key in ("tok_embeddings.weight", "layers.15.attention.wq.weight", "layers.0.attention.q_norm.weight",
                "layers.0.cross_attention.wk.weight", "layers.0.cross_attention_norm.weight",
                "layers.3.feed_forward.w2.weight", "norm.weight", "output.weight"):
        assert key in sd
    assert sd["tok_embeddings.weight"].shape == (64064, 4096) and sd["output.weight"].shape == (64000, 4096)
    assert sd["layers.0.cross_attention.wk.weight"].shape == (1024, 1024)  # 8 kv heads of 128 from T5's 1024
    assert not any("cross" in k for k in models["4b"].state_dict())
    assert models["12b"].state_dict()["layers.39.attention.wq.weight"].shape == (4096, 5120)  # head_dim 128
    params = {name: sum(p.numel() for p in m.parameters()) / 1e9 for name, m in models.items()}
    assert [round(params[n], 1) for n in ("4b", "5b", "12b", "13b")] == [4.0, 4.6, 11.6, 13.3]


def test_rope_splits_the_head_over_frame_row_and_col():
    """head_dim 128: 44 channels for the frame, 42 each for row and col, every angle twice (rotate-half pairs)."""
    cfg = cosmos_config("4b")
    temporal, spatial = inverse_frequencies(cfg)
    assert (len(temporal), len(spatial)) == (22, 21)
    angles = rope_angles(cfg, torch.tensor([[2, 3, 5]]))[0]
    assert torch.equal(angles[:64], angles[64:])
    assert torch.allclose(angles[:22], 2 * temporal) and torch.allclose(angles[22:43], 3 * spatial)
    assert torch.allclose(angles[43:64], 5 * spatial)


def test_yarn_slows_the_low_frequencies_only():
    cfg = cosmos_config("12b")
    plain = cosmos_config("4b")
    plain.dim, plain.head_dim = cfg.dim, cfg.head_dim
    (t, s), (t0, s0) = inverse_frequencies(cfg), inverse_frequencies(plain)
    fast = s0 > 2 * math.pi * cfg.yarn_beta_fast / 40
    slow = s0 < 2 * math.pi * cfg.yarn_beta_slow / 40
    assert fast.any() and slow.any()
    assert torch.equal(s[fast], s0[fast]) and torch.allclose(s[slow], s0[slow] / 2)


def test_attention_sees_relative_positions_on_each_axis():
    """Shifting every position by the same (frame, row, col) leaves q . k unchanged: the rotation is relative."""
    model = tiny_cosmos()
    q, k = torch.randn(2, 12, dtype=torch.float64)
    from mmspec.reference.cosmos import rotate

    def score(pq, pk):
        a = rope_angles(model.config, torch.tensor([pq, pk])).double()
        rq = rotate(q[None, None, None], a[0].cos(), a[0].sin())
        rk = rotate(k[None, None, None], a[1].cos(), a[1].sin())
        return (rq * rk).sum()

    assert torch.allclose(score([1, 0, 1], [0, 1, 0]), score([3, 2, 4], [2, 3, 3]))
    assert not torch.allclose(score([1, 0, 1], [0, 1, 0]), score([1, 0, 1], [0, 0, 1]))


def test_the_tokenizer_takes_the_models_code_count(tmp_path):
    """convert --tokenizer writes the codes the checkpoint's output layer has (8 here), not the 4B's 64000."""
    model = tiny_cosmos(dtype=torch.float32)
    _released(model, tmp_path / "model.pt")
    (tmp_path / "nvidia").mkdir()
    script_tokenizer(tmp_path / "nvidia")
    convert_cosmos(tmp_path / "model.pt", tmp_path / "out", allow_pickle=True, model=model.config,
                   tokenizer=tmp_path / "nvidia")
    assert json.loads((tmp_path / "out" / "tokenizer" / "config.json").read_text())["vocab_size"] == 8

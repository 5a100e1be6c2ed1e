import pytest
import torch

import mmspec
from tiny import tiny_gpt


@pytest.mark.parametrize("kw", [dict(rope_axes=2), dict(rope_axes=3, n_kv_head=1),
                                dict(rope_axes=1, num_classes=0, cond_vocab_size=9, cond_len=3, cond_rope="identity")])
def test_cached_windows_equal_the_teacher_forced_pass(kw):
    model = tiny_gpt(**kw)
    layout = {1: mmspec.Sequence1D(12), 2: mmspec.Grid2D(3, 4), 3: mmspec.Grid3D(2, 2, 3)}[kw["rope_axes"]]
    cond = torch.tensor([[1, 0, 4], [2, 2, 8]]) if kw.get("cond_len") else torch.tensor([1, 3])
    tokens = torch.randint(16, (2, 12), generator=torch.Generator().manual_seed(0))
    full = model.forward_sequence(cond, tokens, layout.positions())
    sess = mmspec.ReferenceTarget(model).session(cond, layout, cfg=False, max_window=5)
    inputs = torch.cat([torch.full((2, 1), -1), tokens[:, :-1]], 1)
    for start in range(0, 12, 5):
        logits, none = sess.forward(inputs[:, start:start + 5], torch.full((2,), start - 1))
        torch.testing.assert_close(logits, full[:, start:start + 5], atol=1e-10, rtol=0)
        assert none is None


def test_zero_condition_rope_reproduces_llamagen():
    """LlamaGen prepends zero cos/sin for condition tokens: their q and k vanish."""
    model = tiny_gpt(num_classes=0, cond_vocab_size=5, cond_len=2)
    rot = model.rope_table(torch.zeros(2, 2, dtype=torch.long))  # two tokens at (0, 0), then the condition row
    assert (rot[2] == 0).all() and (rot[:2] == 1).all()


def test_config_validation():
    with pytest.raises(ValueError, match="exactly one"):
        mmspec.GPTConfig(num_classes=0)
    with pytest.raises(ValueError, match="rotary groups"):
        mmspec.GPTConfig(dim=40, n_head=2, rope_axes=3, num_classes=3)


def test_features_are_the_tapped_layers_inputs_in_the_taps_order():
    """As transformers' hidden_states[i] for i in taps: layer i's input (i = n_layer: the normed output), in the
    order the taps name them, a layer named twice given twice (vLLM's default EAGLE-3 layers (2, L // 2, L - 3)
    repeat one for 4 to 6 layers)."""
    model = tiny_gpt(rope_axes=1, n_layer=3)
    h = torch.randn(2, 5, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    rot = model.rope_table(mmspec.Sequence1D(5).positions())[:5][None, :, None]  # [1, T, 1, D/2]
    logits, none = model.forward_features(h, rot)
    single = {i: model.forward_features(h, rot, taps=(i,))[1] for i in range(4)}  # [B, T, D] each
    assert none is None and torch.equal(single[0], h)
    torch.testing.assert_close(model.output(single[3]), logits, atol=1e-12, rtol=0)
    for taps in [(2, 0), (2, 2, 1), (1, 3)]:
        assert torch.equal(model.forward_features(h, rot, taps=taps)[1], torch.cat([single[i] for i in taps], -1))
    with pytest.raises(ValueError, match=r"layers \(0, 4\).*3 layers"):
        model.forward_features(h, rot, taps=(0, 4))

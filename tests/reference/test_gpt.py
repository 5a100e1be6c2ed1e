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

import pytest
import torch

import mmspec
from mmspec.cache import StaticKVCache
from tiny import tiny_gpt


def test_truncate_is_a_pointer_move_that_only_goes_back():
    cache = StaticKVCache(1, 2, 1, 8, 4)
    slots = cache.slots(3)
    assert slots.tolist() == [[0, 1, 2], [0, 1, 2]]
    cache.advance(slots)
    cache.truncate(torch.tensor([1, 3]))
    assert cache.slots(2).tolist() == [[1, 2], [3, 4]]
    with pytest.raises(RuntimeError, match="cannot truncate"):
        cache.truncate(torch.tensor([2, 4]))
    with pytest.raises(ValueError, match="full"):
        cache.view(cache.slots(6))


def test_a_static_view_attends_over_every_slot_and_masks_what_is_not_yet_valid():
    dynamic, static = StaticKVCache(1, 2, 1, 8, 4), StaticKVCache(1, 2, 1, 8, 4, static=True)
    for cache in (dynamic, static):
        cache.lengths = torch.tensor([2, 4])
        cache.first = torch.tensor([1, 0])
    a, b = dynamic.view(dynamic.slots(2)), static.view(static.slots(2))
    assert a.mask.shape == (2, 1, 2, 6) and b.mask.shape == (2, 1, 2, 8)
    assert torch.equal(b.mask[..., :6], a.mask) and not b.mask[..., 6:].any()
    assert a.mask[0, 0].tolist() == [[False, True, True, False, False, False], [False, True, True, True, False, False]]


@pytest.mark.parametrize("axes,layout", [(2, mmspec.Grid2D(5, 5)), (1, mmspec.Sequence1D(20))])
def test_any_sequence_of_commits_and_rejections_equals_a_fresh_prefill(axes, layout):
    """Feed windows of random drafts, commit a random number of them, repeat; the logits of committed
    positions must equal one fresh forward over the committed sequence."""
    target = mmspec.ReferenceTarget(tiny_gpt(rope_axes=axes))
    g = torch.Generator().manual_seed(0)
    cond, L, B = torch.tensor([1, 2, 3]), 6, 3
    sess = target.session(cond, layout, cfg=True, max_window=L)
    committed = torch.full((B, 0), 0, dtype=torch.long)
    pending = torch.full((B,), -1)
    while committed.shape[1] < layout.length - L:
        n = committed.shape[1]
        drafts = torch.randint(16, (B, L - 1), generator=g)
        window = torch.cat([pending[:, None], drafts], 1)
        cond_logits, null_logits = sess.forward(window, torch.full((B,), n - 1))
        k = int(torch.randint(1, L + 1, (1,), generator=g))
        fresh = target.session(cond, layout, cfg=True, max_window=n + k)
        full = torch.cat([torch.full((B, 1), -1), committed, drafts[:, : k - 1]], 1)
        ref_cond, ref_null = fresh.forward(full, torch.full((B,), -1))
        torch.testing.assert_close(cond_logits[:, :k], ref_cond[:, n:], rtol=0, atol=1e-10)
        torch.testing.assert_close(null_logits[:, :k], ref_null[:, n:], rtol=0, atol=1e-10)
        correction = torch.randint(16, (B,), generator=g)
        committed = torch.cat([committed, drafts[:, : k - 1], correction[:, None]], 1)
        pending = correction

import pytest
import torch

import mmspec
from mmspec.cache import StaticKVCache
from tiny import tiny_gpt


@pytest.mark.parametrize("static", [False, True])
def test_a_rejection_is_a_pointer_move_that_only_goes_back(static):
    """A forward may start at or before each row's length (rewriting what was rejected), never after it."""
    cache = StaticKVCache(1, 2, 1, 8, 4, static=static)
    slots = cache.slots(3)
    assert slots.tolist() == [[0, 1, 2], [0, 1, 2]]
    cache.view(slots)
    cache.advance(slots)
    back = torch.tensor([[1, 2], [3, 4]])
    cache.view(back)  # rows 0 and 1 go back to slots 1 and 3
    cache.advance(back)
    assert cache.slots(2).tolist() == [[3, 4], [5, 6]]
    error = RuntimeError if static else ValueError
    with pytest.raises(error, match="never skipped|skips slots"):
        cache.view(torch.tensor([[4, 5], [2, 3]]))  # row 0 would leave slot 3 unwritten
    with pytest.raises(error, match="full"):
        cache.view(cache.slots(6))


def test_a_shift_moves_every_row_s_slots_later_in_a_longer_cache_and_its_padding_with_them():
    cache = StaticKVCache(2, 2, 1, 8, 4)
    cache.first[:] = torch.tensor([1, 0])
    cache.lengths[:] = torch.tensor([5, 3])
    for kv in cache.k + cache.v:
        kv.copy_(torch.randn(kv.shape))
    before = [kv[:, :, :5].clone() for kv in cache.k + cache.v]
    cache.shift(3, 16)
    assert cache.max_len == 16 and cache.lengths.tolist() == [8, 6] and cache.first.tolist() == [4, 3]
    for kv, old in zip(cache.k + cache.v, before):
        assert torch.equal(kv[:, :, 3:8], old) and not kv[:, :, :3].any()
    assert cache.layers[0][0] is cache.k[0] and cache.rows[0][0].shape == (2 * 1 * 16, 4)  # the views follow
    with pytest.raises(ValueError, match="do not fit"):
        cache.shift(9, 16)


def test_a_static_view_attends_over_every_slot_and_masks_what_is_not_yet_valid():
    dynamic, static = StaticKVCache(1, 2, 1, 8, 4), StaticKVCache(1, 2, 1, 8, 4, static=True)
    for cache in (dynamic, static):
        cache.lengths = torch.tensor([2, 4])
        cache.first = torch.tensor([1, 0])
    a, b = dynamic.view(dynamic.slots(2)), static.view(static.slots(2))
    assert a.mask.shape == (2, 1, 2, 6) and b.mask.shape == (2, 1, 2, 8)
    assert torch.equal(b.mask[..., :6], a.mask) and not b.mask[..., 6:].any()
    assert a.mask[0, 0].tolist() == [[False, True, True, False, False, False], [False, True, True, True, False, False]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_bias_is_the_mask_added_and_attention_through_it_is_the_same(dtype):
    """`bias` (what the forwards pass to SDPA, made once per forward) is 0 where the mask sees, -inf where not, in
    the queries' dtype; attention through it equals attention through the boolean mask, padding included."""
    cache = StaticKVCache(1, 2, 2, 8, 4, dtype=dtype)
    cache.lengths, cache.first = torch.tensor([2, 4]), torch.tensor([1, 0])
    view = cache.view(cache.slots(3))
    bias = view.bias(dtype)
    assert bias.dtype == dtype and view.bias(dtype) is bias  # made once
    assert torch.equal(bias == 0, view.mask) and torch.equal(bias == float("-inf"), ~view.mask)
    q, k, v = (torch.randn(2, 2, n, 4, generator=torch.Generator().manual_seed(n)).to(dtype) for n in (3, 7, 7))
    F = torch.nn.functional
    assert torch.equal(F.scaled_dot_product_attention(q, k, v, attn_mask=bias),
                       F.scaled_dot_product_attention(q, k, v, attn_mask=view.mask))
    cache.first = torch.zeros(2, dtype=torch.long)
    cache.lengths = torch.tensor([3, 3])
    assert cache.view(cache.slots(1)).bias(dtype) is None  # one query per row, no padding: no mask at all


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


def test_rows_out_of_step_and_single_queries_equal_a_fresh_prefill():
    """Windows of 1 or 4 positions in random order (as `window="auto"` may pick), each row committing its own
    number of tokens: rows in step write with a slice copy (and a one-query window needs no mask), rows out of
    step scatter to their own slots; every row's logits equal a fresh forward over its own sequence."""
    target = mmspec.ReferenceTarget(tiny_gpt(rope_axes=1))
    layout = mmspec.Sequence1D(24)
    g = torch.Generator().manual_seed(1)
    cond, B = torch.tensor([1, 2, 3]), 3
    sess = target.session(cond, layout, cfg=True, max_window=4)
    views, make_view = [], sess.cache.view
    sess.cache.view = lambda *a: views.append(make_view(*a)) or views[-1]  # the views the forwards use
    committed = [torch.zeros(0, dtype=torch.long) for _ in range(B)]
    pending, n = torch.full((B,), -1), torch.zeros(B, dtype=torch.long)
    step = 0
    while int(n.max()) < layout.length - 4:
        L = [1, 4][int(torch.randint(2, (1,), generator=g))] if step > 1 else [1, 4][step]
        drafts = torch.randint(16, (B, L - 1), generator=g)
        cond_logits, null_logits = sess.forward(torch.cat([pending[:, None], drafts], 1), n - 1)
        k = torch.randint(1, L + 1, (B,), generator=g) if step > 1 else torch.full((B,), L)  # in step at first
        for b in range(B):
            fresh = target.session(cond[b:b + 1], layout, cfg=True, max_window=int(n[b]) + int(k[b]))
            full = torch.cat([torch.tensor([-1]), committed[b], drafts[b, : k[b] - 1]])[None]
            ref_cond, ref_null = fresh.forward(full, torch.tensor([-1]))
            torch.testing.assert_close(cond_logits[b, : k[b]], ref_cond[0, n[b]:], rtol=0, atol=1e-10)
            torch.testing.assert_close(null_logits[b, : k[b]], ref_null[0, n[b]:], rtol=0, atol=1e-10)
            correction = torch.randint(16, (1,), generator=g)
            committed[b] = torch.cat([committed[b], drafts[b, : k[b] - 1], correction])
        pending = torch.stack([c[-1] for c in committed])
        n, step = n + k, step + 1
    # (rows in step, one query) for every combination the loop meets: slice copy without a mask included
    paths = {(v.start is not None, v.mask is None, v.nodes) for v in views[1:]}  # after the prefill
    assert paths == {(True, True, 1), (True, False, 4), (False, False, 1), (False, False, 4)}

"""A request's memory is estimated before any work, for every target that gives its sizes; large requests run in
batches that fit, with the same rows."""
import pytest
import torch

import mmspec
from mmspec import memory
from mmspec.api import row_need
from mmspec.adapters.chameleon import ChameleonImage
from mmspec.adapters.cosmos import CosmosTarget
from mmspec.adapters.text import HFCausalLM
from mmspec.adapters.emu3 import Emu3Image
from mmspec.adapters.janus import JanusImage
from tiny import (BOI, BOS, C_BOS, C_SEP, E_BOS, E_WRAP, tiny_chameleon, tiny_cosmos, tiny_emu3, tiny_gpt, tiny_janus,
                  tiny_llama)


@pytest.fixture
def target():
    return mmspec.ReferenceTarget(tiny_gpt(dtype=torch.float32))


def _gen(target, **kw):
    kw = {"method": "coupled", "window": 3, "sampling": {"cfg_scale": 2.0, "top_k": 8}, "seed": 5, **kw}
    return mmspec.generate(target, torch.tensor([0, 2, 3]), mmspec.Grid2D(3, 3), num_samples=3, **kw)


@pytest.mark.parametrize("given", [None, "row", "condition", "all"])
def test_batches_give_the_same_rows_and_stats_as_one_call(target, given):
    g = {"row": torch.randint(-1, 16, (9, 9), generator=torch.Generator().manual_seed(0)),
         "condition": torch.tensor([[3, -1, -1, 4, -1, -1, -1, -1, -1]] * 3), "all": torch.full((1, 9), -1)}.get(given)
    whole = _gen(target, given=g)
    seen, at_once = set(), []

    def hook(state, k):
        seen.update(state.row_ids)
        at_once.append(len(state.n))
    parts = _gen(target, given=g, batch_size=4, on_commit=hook)
    assert torch.equal(whole.tokens, parts.tokens) and torch.equal(whole.lengths, parts.lengths)
    assert torch.equal(whole.stats.committed, parts.stats.committed) and parts.stats.commit_step.shape == (9, 9)
    assert seen == set(range(9)) and max(at_once) == 4  # every row, 4 places at a time


def test_rows_that_do_not_fit_run_in_batches_that_do(target, monkeypatch):
    per_row = memory.row_bytes(target, None, mmspec.Grid2D(3, 3), cfg=True, window=3)
    monkeypatch.setattr(memory, "free_bytes", lambda device: 2 * (memory.fixed_bytes() + 4 * per_row))
    sizes = []
    _gen(target, on_commit=lambda state, k: sizes.append(len(state.seq)))
    assert max(sizes) == 4


def test_a_batch_that_does_not_fit_is_refused_in_one_line_before_any_work(target, monkeypatch):
    per_row = memory.row_bytes(target, None, mmspec.Grid2D(3, 3), cfg=True, window=3)
    monkeypatch.setattr(memory, "free_bytes", lambda device: 2 * (memory.fixed_bytes() + 4 * per_row))
    monkeypatch.setattr(target, "session", None)  # any work would fail otherwise
    with pytest.raises(ValueError, match=r"^6 rows at a time need about .* GiB \(KV cache, logits and drafts, CFG's "
                                         r"copies included\) and .* GiB is free for them, which holds 4 rows: pass "
                                         r"batch_size=4 \(CLI: --batch-size 4\)$"):
        _gen(target, batch_size=6)
    monkeypatch.setattr(memory, "free_bytes", lambda device: memory.fixed_bytes())
    with pytest.raises(ValueError, match="which holds not even one row"):
        _gen(target)


def test_the_estimate_counts_cfg_s_copies_and_the_window(target):
    layout = mmspec.Grid2D(3, 3)
    assert memory.row_bytes(target, None, layout, cfg=True, window=3) > memory.row_bytes(target, None, layout, cfg=False, window=3)
    assert memory.row_bytes(target, None, layout, cfg=False, window=8) > memory.row_bytes(target, None, layout, cfg=False, window=3)
    assert memory.row_bytes(object(), None, layout, cfg=False, window=3) is None
    assert memory.free_bytes("cpu") > 0


def _cases():
    """(target, condition, layout, sampling, given) per target kind: 2 conditions (one for a Cosmos base model) of
    different lengths where a condition has one."""
    sampled = {"temperature": 1.0, "top_k": 8}
    cosmos, video2world = tiny_cosmos(dtype=torch.float32), tiny_cosmos(True, dtype=torch.float32)
    first = torch.full((1, cosmos.layout.length), -1)
    first[0, 0] = 1  # a base model continues a video: its first token at least is given
    chameleon = ChameleonImage(tiny_chameleon(dtype=torch.float32))
    janus, emu3 = JanusImage(tiny_janus(dtype=torch.float32)), Emu3Image(tiny_emu3(dtype=torch.float32))
    return {
        "reference": (mmspec.ReferenceTarget(tiny_gpt(dtype=torch.float32)), torch.tensor([0, 2]),
                      mmspec.Grid2D(3, 3), {**sampled, "cfg_scale": 2.0}, None),
        "text": (HFCausalLM(tiny_llama(dtype=torch.float32)), [[1, 5, 7], [1, 3, 9, 9, 2]], mmspec.Sequence1D(6),
                 sampled, None),
        "chameleon": (chameleon, [[C_BOS, 40, 41, 42, C_SEP], [C_BOS, 45, C_SEP]], chameleon.layout(2, 4),
                      {"temperature": 1.0, "top_k": 4, "cfg_scale": 3.0}, None),
        "cosmos": (CosmosTarget(cosmos), None, cosmos.layout, sampled, first),
        "janus": (janus, [[BOS, 10, 11, 12, BOI], [BOS, 20, BOI]], janus.layout(img_size=6),
                  {"temperature": 1.0, "cfg_scale": 5.0}, None),
        "emu3": (emu3, {"prompt": [[E_BOS, 50, 51, E_WRAP], [E_BOS, E_WRAP]],
                        "negative_prompt": [[E_BOS, 53, 54, 55, 56]]},
                 emu3.layout(2, 3), {"temperature": 1.0, "top_k": 8, "cfg_scale": 3.0, "cfg_mode": "log_softmax"},
                 None),
        "video2world": (CosmosTarget(video2world), torch.randn(2, 64, 12, generator=torch.Generator().manual_seed(0)),
                        video2world.layout, sampled, None),
    }


@pytest.mark.parametrize("kind", ["reference", "text", "chameleon", "janus", "emu3", "cosmos", "video2world"])
def test_the_kv_cache_estimate_is_what_a_session_allocates(kind):
    target, condition, layout, sampling, _ = _cases()[kind]
    cfg, window = mmspec.Sampling.coerce(sampling).cfg, 5
    session = target.session(condition, layout, cfg=cfg, num_samples=1, max_window=window)
    allocated = sum(t.numel() * t.element_size() for t in session.cache.k + session.cache.v)  # every layer's k, v
    estimate = session.batch_size * memory.kv_bytes(target.memory_shape(condition, layout), layout, cfg, window)
    if kind == "video2world":  # its text features counted as cache slots: above what the self-attention holds
        assert estimate > allocated
    else:
        assert estimate == allocated


@pytest.mark.parametrize("kind", ["text", "chameleon", "janus", "emu3", "cosmos", "video2world"])
def test_every_target_s_large_requests_run_in_batches_that_fit_and_a_batch_that_does_not_is_refused(kind,
                                                                                                   monkeypatch):
    target, condition, layout, sampling, given = _cases()[kind]
    run = dict(method="exact", window=3, sampling=sampling, seed=5, num_outputs=3, given=given)
    whole = mmspec.generate(target, condition, layout, **run)
    # (as generate estimates it: the room for a run of structural tokens included, 4 where Emu3's image ends)
    per_row = row_need(target, condition, layout, method="exact", window=3, sampling=sampling, given=given)
    monkeypatch.setattr(memory, "free_bytes", lambda device: 2 * (memory.fixed_bytes() + 2 * per_row))
    sizes = []
    parts = mmspec.generate(target, condition, layout, on_commit=lambda state, k: sizes.append(len(state.seq)), **run)
    assert max(sizes) == 2 and torch.equal(whole.tokens, parts.tokens)
    monkeypatch.setattr(target, "session", None)  # any work would fail otherwise
    with pytest.raises(ValueError, match=r"^3 rows at a time need about .* which holds 2 rows: pass batch_size=2"):
        mmspec.generate(target, condition, layout, batch_size=3, **run)

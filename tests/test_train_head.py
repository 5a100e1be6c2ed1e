"""`mmspec train-head`: a head trained from the model's own samples, resumable, that the pipelines then use."""
import json
import shutil

import pytest
import torch

from mmspec.pipelines import load_pipeline
from mmspec.reference.eagle import EagleHead, HeadConfig, load_head
from mmspec.sampling import Sampling
from mmspec.train_head import TrainConfig, _ttt_mask, head_loss, train_head

TINY = dict(samples=8, batch=4, epochs=1.0, ttt=2, checkpoint_every=1)


@pytest.fixture
def image_folder(tiny_models, tmp_path):
    shutil.copytree(tiny_models / "vq", tmp_path / "vq")
    shutil.copytree(tiny_models / "image", tmp_path / "image")
    return tmp_path / "image"


def test_a_trained_head_lands_in_the_model_folder_with_its_card_and_runs_exactly(image_folder):
    out = train_head(image_folder, train=TrainConfig(**TINY), progress=False)
    assert out == image_folder / "head"
    card = json.loads((out / "config.json").read_text())["card"]
    assert card["samples"] == 8 and card["steps"] == 2
    assert set(card["acceptance"]) >= {"eagle", "exact"}
    assert "EAGLE-3 draft head" in (out / "README.md").read_text()
    head = load_head(out)
    assert head.config.rope_axes == 2 and head.config.target_layers == (1, 1, 2)
    pipe = load_pipeline("image", image_folder, window_cache="off")
    ar = pipe(["red heart"], seed=3, method="ar")
    eagle = pipe(["red heart"], seed=3, method={"name": "eagle", "exact": True}, window=4)
    assert torch.equal(ar.tokens, eagle.tokens)


def test_training_resumes_from_its_checkpoint_without_distilling_again(image_folder, tmp_path):
    out = tmp_path / "head"
    train_head(image_folder, out, TrainConfig(**TINY), progress=False)
    data = out / "train" / "data.safetensors"
    stamp = data.stat().st_mtime_ns
    train_head(image_folder, out, TrainConfig(**{**TINY, "epochs": 2.0}), progress=False)
    assert data.stat().st_mtime_ns == stamp
    state = json.loads((out / "train" / "state.json").read_text())
    assert state["step"] == 4  # two steps more, on top of the first run's two
    assert json.loads((out / "config.json").read_text())["card"]["steps"] == 4


def test_a_text_head_trains_on_a_transformers_target(tiny_text, tmp_path):
    out = train_head(tiny_text / "target", tmp_path / "head", TrainConfig(**TINY, text_tokens=12), progress=False)
    head = load_head(out)
    assert head.config.rope_axes == 1 and head.config.vocab_size == 40


def test_a_drafting_step_sees_the_true_pairs_up_to_s_back_and_its_own_drafts_after_them():
    mask = _ttt_mask(5, 2, "cpu")  # [5, 15]: step 0's keys, step 1's, step 2's
    i = 4
    assert mask[i, :5].tolist() == [True, True, True, False, False]  # true pairs <= i - 2
    assert mask[i, 5:10].tolist() == [False, False, False, True, False]  # step 1's draft at i - 1
    assert mask[i, 10:].tolist() == [False, False, False, False, True]  # its own pair at i


def test_the_loss_falls_when_the_head_learns_a_batch():
    torch.manual_seed(0)
    cfg = HeadConfig(hidden_size=16, num_attention_heads=2, intermediate_size=32, vocab_size=12, target_hidden_size=16,
                     target_layers=(0, 1), rope_axes=1)
    head, embed = EagleHead(cfg), torch.nn.Embedding(12, 16)
    B, N = 4, 10
    logp = torch.randn(B, N, 12).log_softmax(-1).topk(6, -1)
    batch = {"tokens": torch.randint(12, (B, N)), "features": torch.randn(B, 1, N, 32),
             "top_ids": logp.indices, "top_logp": logp.values}
    rope = head.rope(torch.arange(N)[:, None])
    train, sampling = TrainConfig(ttt=2), Sampling(temperature=1.0)
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    first = head_loss(head, embed, batch, sampling, train, rope)[0].item()
    for _ in range(30):
        loss, _ = head_loss(head, embed, batch, sampling, train, rope)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.8 * first


def test_drafting_through_the_cache_computes_what_a_causal_pass_does(tiny_models):
    """HeadSession writes pairs in windows and carries one column on; EagleHead.forward is the plain causal pass."""
    from types import SimpleNamespace

    from mmspec.drafters.eagle import HeadSession
    from mmspec.layouts import Grid2D
    from tiny import tiny_head

    torch.manual_seed(0)
    head = tiny_head(32, 24, rope_axes=2, seed=4)
    embed = torch.nn.Embedding(32, 24)
    target = SimpleNamespace(embed=embed)
    layout = Grid2D(4, 4)
    state = SimpleNamespace(seq=torch.zeros(2, 20, dtype=torch.long), batch_size=2, length=16, max_window=4,
                            layout=layout)
    session = HeadSession(head, target, state, rows=2)
    F = head.config.feature_size
    features, tokens = torch.randn(2, 9, F), torch.randint(32, (2, 9))
    with torch.no_grad():
        out, logits = head(embed(tokens), features, head.rope(layout.positions()[:9]))
        for start, width in ((0, 3), (3, 1), (4, 5)):  # windows of pairs, the last column of each carried on
            cols = slice(start, start + width)
            last = torch.full((2, 1), width - 1)
            o, z = session.forward(features[:, cols], tokens[:, cols], torch.full((2,), start), last)
            torch.testing.assert_close(o[:, 0], out[:, start + width - 1], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(z[:, 0], logits[:, start + width - 1], atol=1e-4, rtol=1e-4)


def test_a_head_over_a_smaller_draft_vocabulary_keeps_the_tokens_the_samples_use_most(tiny_text, tmp_path):
    out = train_head(tiny_text / "target", tmp_path / "head", TrainConfig(**TINY, text_tokens=12, draft_vocab=16),
                     progress=False)
    head = load_head(out)
    assert head.config.draft_vocab_size == 16 and head.maps_vocabulary() and int(head.t2d.sum()) == 16
    ids = torch.arange(16) + head.d2t  # the target ids the head drafts, ascending and in range
    assert bool((ids[1:] > ids[:-1]).all()) and int(ids.max()) < 40 and bool(head.t2d[ids].all())
    pipe = load_pipeline("text", tiny_text / "target", window_cache="off")
    ar = pipe(["a b"], seed=2, method="ar", max_new_tokens=10)
    eagle = pipe(["a b"], seed=2, method={"name": "eagle", "head": out, "exact": True}, window=4, max_new_tokens=10)
    assert [t.tolist() for t in ar.tokens] == [t.tolist() for t in eagle.tokens]


def test_a_video_head_learns_from_the_clips_users_get_frame_0_drawn_by_the_image_model(tiny_models, tmp_path):
    for name in ("vq", "image", "video-from-text"):
        shutil.copytree(tiny_models / name, tmp_path / name)
    import random

    from mmspec.train_head import _Target, default_config, distill
    target = _Target(tmp_path / "video-from-text", "cpu")
    cond, layout, given = target.conditions(4, random.Random(0), 0)
    frame = layout.h * layout.w
    assert given.shape == (4, layout.length) and (given[:, :frame] >= 0).all() and (given[:, frame:] == -1).all()
    data = distill(target, default_config(target), TrainConfig(**TINY), progress=False)
    first = _Target(tmp_path / "video-from-text", "cpu").conditions(4, random.Random(0), 0)[2]
    assert torch.equal(data["tokens"][:4, :frame], first[:, :frame])  # the samples start from the given frames 0
    train_head(tmp_path / "video-from-text", train=TrainConfig(**TINY), progress=False)
    pipe = load_pipeline("video", tmp_path / "video-from-text", window_cache="off")
    ar = pipe(["bounce red apple"], seed=3, method="ar")
    eagle = pipe(["bounce red apple"], seed=3, method={"name": "eagle", "exact": True}, window=4)
    assert torch.equal(ar.tokens, eagle.tokens)

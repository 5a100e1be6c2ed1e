"""LlamaGen checkpoints: key layout, fused qkv, zero RoPE on condition tokens, caption masks."""
import argparse

import pytest
import torch
from safetensors.torch import save_file

import mmspec
from mmspec.reference.checkpoint import convert_llamagen, load_gpt, load_llamagen
from tiny import llamagen_state_dict

LAYERS, HEADS, DIM, VOCAB, CLASSES, GRID = 2, 2, 32, 24, 5, 4


def llamagen_logits(sd, cond_emb, tokens, emb_mask=None):
    """LlamaGen's training-mode forward, restated: 2D RoPE table with zero rows for the condition."""
    T = cond_emb.shape[1]
    head = DIM // HEADS
    half = head // 2
    freqs = 1.0 / (10000 ** (torch.arange(0, half, 2)[: half // 2].float() / half))
    f = torch.outer(torch.arange(GRID).float(), freqs)
    grid = torch.cat([f[:, None].expand(-1, GRID, -1), f[None].expand(GRID, -1, -1)], -1).flatten(0, 1)
    table = torch.cat([torch.zeros(T, half, 2), torch.stack([grid.cos(), grid.sin()], -1)])
    h = torch.cat([cond_emb, sd["tok_embeddings.weight"][tokens[:, :-1]]], 1)
    L = h.shape[1]
    fc = table[:L].view(1, L, 1, half, 2)

    def rope(x):
        xs = x.reshape(*x.shape[:-1], -1, 2)
        return torch.stack([xs[..., 0] * fc[..., 0] - xs[..., 1] * fc[..., 1],
                            xs[..., 1] * fc[..., 0] + xs[..., 0] * fc[..., 1]], -1).flatten(3)

    norm = lambda x, w: x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w  # noqa: E731
    mask = torch.ones(L, L).tril().bool()[None].repeat(len(h), 1, 1)
    if emb_mask is not None:
        mask[:, :, :T] &= emb_mask[:, None].bool()
        mask |= torch.eye(L, dtype=torch.bool)
    for i in range(LAYERS):
        p = f"layers.{i}."
        x = norm(h, sd[p + "attention_norm.weight"])
        q, k, v = (x @ sd[p + "attention.wqkv.weight"].T).split(DIM, -1)
        q, k, v = (t.view(len(h), L, HEADS, head) for t in (q, k, v))
        q, k = rope(q), rope(k)
        att = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                               attn_mask=mask[:, None])
        h = h + att.transpose(1, 2).reshape(len(h), L, DIM) @ sd[p + "attention.wo.weight"].T
        x = norm(h, sd[p + "ffn_norm.weight"])
        ff = torch.nn.functional.silu(x @ sd[p + "feed_forward.w1.weight"].T) * (x @ sd[p + "feed_forward.w3.weight"].T)
        h = h + ff @ sd[p + "feed_forward.w2.weight"].T
    return (norm(h, sd["norm.weight"]) @ sd["output.weight"].T)[:, T - 1:]


KW = dict(model=(LAYERS, HEADS, DIM), image_size=GRID * 16, vocab_size=VOCAB)


def test_class_checkpoint_loads_from_pickle_or_safetensors_and_matches_llamagen(tmp_path):
    sd = llamagen_state_dict()
    torch.save({"model": sd, "optimizer": {}}, tmp_path / "c2i.pt")
    save_file(sd, str(tmp_path / "c2i.safetensors"))
    with pytest.raises(ValueError, match="pickle"):
        load_llamagen(tmp_path / "c2i.pt", num_classes=CLASSES, **KW)
    a = load_llamagen(tmp_path / "c2i.pt", allow_pickle=True, num_classes=CLASSES, **KW)
    b = load_llamagen(tmp_path / "c2i.safetensors", num_classes=CLASSES, **KW)
    labels, tokens = torch.tensor([1, 4]), torch.randint(VOCAB, (2, GRID * GRID))
    layout = mmspec.Grid2D(GRID, GRID)
    expected = llamagen_logits(sd, sd["cls_embedding.embedding_table.weight"][labels][:, None], tokens)
    with torch.no_grad():
        for model in (a, b):
            torch.testing.assert_close(model.forward_sequence(labels, tokens, layout.positions()), expected,
                                       atol=1e-4, rtol=1e-4)
        sess = mmspec.ReferenceTarget(a).session(labels, layout, cfg=False, max_window=GRID * GRID)
        window = torch.cat([torch.full((2, 1), -1), tokens[:, :-1]], 1)
        torch.testing.assert_close(sess.forward(window, torch.full((2,), -1))[0], expected, atol=1e-4, rtol=1e-4)
    folder = convert_llamagen(tmp_path / "c2i.safetensors", tmp_path / "converted", num_classes=CLASSES, **KW)
    out = mmspec.generate(mmspec.ReferenceTarget(load_gpt(folder)), labels, layout, method="coupled",
                          sampling={"cfg_scale": 4.0, "top_k": 10})
    assert out.tokens.shape == (2, GRID * GRID)


def _save(sd, folder, name="ckpt.safetensors"):
    save_file(sd, str(folder / name))
    return folder / name


def test_caption_checkpoint_with_left_padded_masks(tmp_path):
    sd = llamagen_state_dict("t2i")
    model = load_llamagen(_save(sd, tmp_path), model_type="t2i", caption_dim=12, cls_token_num=3, **KW)
    feats = torch.randn(2, 3, 12)
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    tokens = torch.randint(VOCAB, (2, GRID * GRID))
    cap = lambda x: torch.nn.functional.gelu(x @ sd["cls_embedding.cap_proj.fc1.weight"].T, approximate="tanh") \
        @ sd["cls_embedding.cap_proj.fc2.weight"].T  # noqa: E731
    expected = llamagen_logits(sd, cap(feats), tokens, mask)
    sess = mmspec.ReferenceTarget(model).session((feats, mask), mmspec.Grid2D(GRID, GRID), cfg=True, max_window=16)
    window = torch.cat([torch.full((2, 1), -1), tokens[:, :-1]], 1)
    cond, null = sess.forward(window, torch.full((2,), -1))
    torch.testing.assert_close(cond, expected, atol=1e-4, rtol=1e-4)
    null_expected = llamagen_logits(sd, cap(sd["cls_embedding.uncond_embedding"]).expand(2, -1, -1), tokens, mask)
    torch.testing.assert_close(null, null_expected, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="on the left"):
        mmspec.ReferenceTarget(model).session((feats, torch.tensor([[1, 0, 1], [1, 1, 1]])),
                                              mmspec.Grid2D(GRID, GRID), cfg=True)


def test_mismatched_or_nullless_checkpoints_are_refused(tmp_path):
    sd = llamagen_state_dict()
    with pytest.raises(ValueError, match="do not match"):
        load_llamagen(_save(sd, tmp_path), num_classes=CLASSES + 1, **KW)
    with pytest.raises(ValueError, match="do not match"):
        load_llamagen(_save(sd, tmp_path), num_classes=CLASSES, **{**KW, "vocab_size": VOCAB + 1})
    sd["cls_embedding.embedding_table.weight"] = sd["cls_embedding.embedding_table.weight"][:CLASSES]
    model = load_llamagen(_save(sd, tmp_path), num_classes=CLASSES, class_dropout_prob=0.0, **KW)
    with pytest.raises(ValueError, match="null condition"):
        mmspec.generate(mmspec.ReferenceTarget(model), torch.tensor([0]), mmspec.Grid2D(GRID, GRID),
                        sampling={"cfg_scale": 2.0})
    plain = mmspec.generate(mmspec.ReferenceTarget(model), torch.tensor([0]), mmspec.Grid2D(GRID, GRID))
    assert plain.tokens.shape == (1, GRID * GRID)
    with pytest.raises(FileNotFoundError):
        load_gpt("/nonexistent/folder")


def test_training_checkpoints_with_args_load_and_other_classes_are_refused(tmp_path):
    """LlamaGen's training scripts save {"model", "optimizer", "steps", "args"}, args an argparse.Namespace: it loads
    (the weights as from a plain checkpoint), and any other class in the pickle is still refused, by name."""
    sd = llamagen_state_dict()
    args = argparse.Namespace(gpt_model="GPT-B", image_size=GRID * 16, results_dir="/tmp/x")
    torch.save({"model": sd, "optimizer": {}, "steps": 7, "args": args}, tmp_path / "train.pt")
    model = load_llamagen(tmp_path / "train.pt", allow_pickle=True, num_classes=CLASSES, **KW)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in
               load_llamagen(_save(sd, tmp_path), num_classes=CLASSES, **KW).state_dict().items())
    torch.save({"model": sd, "args": args, "extra": Unsafe()}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match=r"holds the class .*Unsafe, which mmspec does not unpickle"):
        load_llamagen(tmp_path / "other.pt", allow_pickle=True, num_classes=CLASSES, **KW)


class Unsafe:
    """A class a pickle may name: torch's weights-only unpickler must not build it."""

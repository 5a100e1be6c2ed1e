"""Emu3 image generation: greedy equals transformers' generate with constrained decoding and CFG, the exact
law holds across a row end, errors are clear."""
import functools
import itertools
import json

import numpy as np
import pytest
import torch

import mmspec
from mmspec.adapters.emu3 import Emu3Image, emu3_layout
from tiny import E_BOI as BOI, E_BOS as BOS, E_EOI as EOI, E_EOL as EOL, E_H as H
from tiny import E_PAD as PAD, E_W as W, E_WRAP as WRAP
from tiny import (chi_square_pvalue, emu3_allowed_tokens, left_pad, png, reference_p, rounded, sequence_id, tiny_emu3,
                  tiny_head)

METHODS = ["ar", "jacobi", "coupled", "gumbel", "exact", "lookup", "draft-model", "pac", "eagle"]
@functools.lru_cache(maxsize=None)
def _model(**kw):
    return tiny_emu3(**kw)


def _method(name, **kw):
    if name == "draft-model":
        return {"name": "draft-model", "model": Emu3Image(tiny_emu3(layers=1, seed=5, **kw))}
    if name == "eagle":  # a random head over the session's features (hidden_states 0, 1, 1) and embeddings
        vocab = Emu3Image(_model(**kw)).vocab_size
        return {"name": "eagle", "head": tiny_head(vocab, 32, layers=(0, 1, 1), rope_axes=2, seed=5)}
    return name


# "<bos> text <|image start|> h*w <|image token|>"; negative prompts of other lengths than the prompts
PROMPTS = [[BOS, 50, 51, 52, BOI, 60, 61, WRAP], [BOS, 55, BOI, 60, 61, WRAP]]
NEGATIVE = [[BOS, 53, 54], [BOS, 58, 59, 57, 56]]


@functools.lru_cache(maxsize=None)
def hf_greedy(batch: int, scale: float, negative: bool = True) -> torch.Tensor:
    model = _model()
    ids, mask = left_pad(PROMPTS[:batch], PAD)
    kw = {}
    if negative:
        neg, neg_mask = left_pad(NEGATIVE[:batch], PAD)
        kw = dict(negative_prompt_ids=neg, negative_prompt_attention_mask=neg_mask)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=(W + 1) * H + 3, do_sample=False,
                         prefix_allowed_tokens_fn=emu3_allowed_tokens(model, H, W), guidance_scale=scale, **kw)
    return out[:, ids.shape[1]:]


GREEDY = {"temperature": 0, "cfg_scale": 3.0, "cfg_mode": "log_softmax"}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_equals_transformers_generate(method, batch):
    target = Emu3Image(_model())
    condition = {"prompt": PROMPTS[:batch], "negative_prompt": NEGATIVE[:batch]}
    got = mmspec.generate(target, condition, target.layout(H, W), method=_method(method), window=5, sampling=GREEDY)
    assert torch.equal(got.tokens, hf_greedy(batch, 3.0))


def test_padded_batch_rows_equal_their_own_runs():
    model = _model()
    one = []
    for p, n in zip(PROMPTS, NEGATIVE):
        p, n = torch.tensor([p]), torch.tensor([n])
        out = model.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=(W + 1) * H + 3, do_sample=False,
                             prefix_allowed_tokens_fn=emu3_allowed_tokens(model, H, W), guidance_scale=3.0,
                             negative_prompt_ids=n, negative_prompt_attention_mask=torch.ones_like(n))
        one.append(out[:, p.shape[1]:])
    assert torch.equal(torch.cat(one), hf_greedy(2, 3.0))


def test_transformers_default_null_condition_is_the_last_prompt_token():
    """Without negative_prompt_ids transformers runs the prompt's last token alone as the null condition."""
    target = Emu3Image(_model())
    condition = {"prompt": PROMPTS, "negative_prompt": [p[-1:] for p in PROMPTS]}
    got = mmspec.generate(target, condition, target.layout(H, W), method="coupled", window=4, sampling=GREEDY)
    assert torch.equal(got.tokens, hf_greedy(2, 3.0, negative=False))


def test_without_cfg_and_with_a_single_negative_prompt():
    model = _model()
    ids, mask = left_pad(PROMPTS, PAD)
    hf = model.generate(ids, attention_mask=mask, max_new_tokens=(W + 1) * H + 3, do_sample=False,
                        prefix_allowed_tokens_fn=emu3_allowed_tokens(model, H, W))[:, ids.shape[1]:]
    target = Emu3Image(model)
    got = mmspec.generate(target, PROMPTS, target.layout(H, W), method="jacobi", window=6, sampling={"temperature": 0})
    assert torch.equal(got.tokens, hf)
    one = mmspec.generate(target, {"prompt": PROMPTS, "negative_prompt": NEGATIVE[0]}, target.layout(H, W),
                          method="exact", window=3, sampling=GREEDY)
    two = mmspec.generate(target, {"prompt": PROMPTS, "negative_prompt": [NEGATIVE[0]] * 2}, target.layout(H, W),
                          method="ar", sampling=GREEDY)
    assert torch.equal(one.tokens, two.tokens)


def _law(model, prompt, negative, s: mmspec.Sampling, h, w, m):
    """Exact law of the first m free tokens (they may cross a row end), in transformers' order: log-softmax
    CFG over the whole vocabulary, then the visual-token constraint, then temperature and top-k."""
    layout = emu3_layout(model, h, w)
    free = (layout.forced() < 0).nonzero().flatten()[:m].tolist()
    visual = torch.tensor(model.vocabulary_mapping.image_tokens)
    codes = torch.tensor(list(itertools.product(range(len(visual)), repeat=m)))  # [C^m, m]
    seqs = layout.forced()[: free[-1]].repeat(len(codes), 1)  # generated tokens before the last free one
    seqs[:, free[:-1]] = visual[codes[:, :-1]]
    with torch.no_grad():
        logp = [model(torch.cat([torch.tensor(ids).expand(len(seqs), -1), seqs], 1)).logits[:, len(ids) - 1:]
                .double().log_softmax(-1) for ids in (prompt, negative)]
    mixed = logp[1] + s.cfg_scale * (logp[0] - logp[1])
    mixed = torch.full_like(mixed, -torch.inf).index_copy(-1, visual, mixed[..., visual])
    plain = mmspec.Sampling(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p)
    law = torch.zeros(len(visual) ** m, dtype=torch.float64)
    for row, code in enumerate(codes):
        law[sequence_id(code, len(visual))] = torch.prod(torch.stack(
            [reference_p(mixed[row, i], None, plain)[visual[c]] for i, c in zip(free, code.tolist())]))
    return law, free


def _stop_after(length):
    """End each row once it has `length` tokens: later positions cannot change the law of the first ones."""
    def on_commit(state, k):
        n = state.n  # (read once: a request's rows gather theirs at every read)
        for row in (state.active & (n >= length)).nonzero().flatten().tolist():
            state.finish(row, int(n[row]))
    return on_commit


@pytest.mark.parametrize("method", METHODS)
def test_distribution_of_the_first_tokens(method):
    """A 2x2 grid: free, free, EOL, free, ... The first 3 free tokens follow the exact law (6 codes: 216 cells)."""
    codes, h, w, small = 6, 2, 2, dict(vocab_size=24, start=9)  # a small vocabulary keeps 20,000 rows fast
    model = _model(codes=codes, layers=1, dtype=torch.float32, **small)
    prompt, negative = [BOS, 15, 16, BOI, 17, 18, WRAP], [BOS, 19, 20, 21, 22]
    s = mmspec.Sampling(temperature=0.9, top_k=4, cfg_scale=3.0, cfg_mode="log_softmax")
    law, free = _law(model, prompt, negative, s, h, w, 3)
    assert free == [0, 1, 3]
    target = Emu3Image(model)
    out = mmspec.generate(target, {"prompt": [prompt], "negative_prompt": [negative]}, target.layout(h, w),
                          method=_method(method, codes=codes, dtype=torch.float32, **small), window=4, sampling=s,
                          num_samples=20_000, seed=1, on_commit=_stop_after(free[-1] + 1))
    assert (out.tokens[:, 2] == EOL).all()
    assert ((out.tokens[:, free] >= 9) & (out.tokens[:, free] < 9 + codes)).all()
    cells = sequence_id(out.tokens[:, free] - 9, codes)
    assert chi_square_pvalue(cells, law) > 1e-3
    if method == "ar":  # the test has the power to see a null condition that ignores the negative prompt
        wrong, _ = _law(model, prompt, prompt[-1:], s, h, w, 3)
        assert chi_square_pvalue(cells, wrong) < 1e-6


def test_decode_and_loading_from_a_local_folder(tmp_path):
    model = tiny_emu3(dtype=torch.float32)
    model.save_pretrained(tmp_path / "emu3")
    target = Emu3Image.from_pretrained(tmp_path / "emu3")
    condition = {"prompt": PROMPTS, "negative_prompt": NEGATIVE}
    sampling = {"cfg_scale": 3.0, "cfg_mode": "log_softmax", "top_k": 8}
    out = mmspec.generate(target, condition, target.layout(H, W), method="coupled", window=6, sampling=sampling, seed=3)
    direct = Emu3Image(model)
    again = mmspec.generate(direct, condition, direct.layout(H, W), method="coupled", window=6, sampling=sampling, seed=3)
    assert torch.equal(out.tokens, again.tokens)
    images = target.decode(out.tokens, H, W)
    assert images.shape == (2, 3, 4 * H, 4 * W) and torch.isfinite(images).all()

    with pytest.raises(FileNotFoundError, match="no folder"):
        Emu3Image.from_pretrained(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    model.config.save_pretrained(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="safetensors"):
        Emu3Image.from_pretrained(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    cfg = json.loads((tmp_path / "emu3" / "config.json").read_text())
    cfg["text_config"]["intermediate_size"] = 48
    (tmp_path / "bad" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "bad" / "model.safetensors").write_bytes((tmp_path / "emu3" / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="do not match"):
        Emu3Image.from_pretrained(tmp_path / "bad")


def test_emu3_errors():
    target = Emu3Image(_model())
    with pytest.raises(ValueError, match="negative prompt"):
        mmspec.generate(target, PROMPTS, target.layout(H, W), sampling=GREEDY)
    with pytest.raises(ValueError, match="one per prompt"):
        mmspec.generate(target, {"prompt": PROMPTS, "negative_prompt": NEGATIVE * 2}, target.layout(H, W),
                        sampling=GREEDY)
    with pytest.raises(ValueError, match="keys"):
        mmspec.generate(target, {"prompts": PROMPTS}, target.layout(H, W), sampling=GREEDY)
    for layout in [mmspec.Grid2D(H, W), mmspec.Grid2D(H, W, row_end_token=EOL), mmspec.Sequence1D(11)]:
        with pytest.raises(ValueError, match="Emu3"):
            mmspec.generate(target, {"prompt": PROMPTS, "negative_prompt": NEGATIVE}, layout, sampling=GREEDY)
    with pytest.raises(ValueError, match="<\\|extra_201\\|>"):
        Emu3Image(tiny_emu3(names=False)).layout(H, W)
    unnamed = Emu3Image(tiny_emu3(names=False), eoi_token_id=EOI)
    with pytest.raises(ValueError, match="EOF"):
        unnamed.layout(H, W)


EMU3_SETTINGS = {"image_mean": [0.5] * 3, "image_std": [0.5] * 3}  # Emu3's processor's
OTHER_SETTINGS = {"image_mean": [0.4, 0.5, 0.6], "image_std": [0.3, 0.5, 0.7]}


@pytest.mark.parametrize("settings", [EMU3_SETTINGS, OTHER_SETTINGS], ids=["emu3", "other"])
def test_images_hold_the_bytes_emu3s_processor_writes(tmp_path, settings):
    """Same tokens -> Emu3's own cast: transformers' Emu3ImageProcessor.postprocess with the folder's processor
    settings (preprocessor_config.json), on the decoded pictures -> the same PNG bytes."""
    from transformers import Emu3ImageProcessor

    processor = Emu3ImageProcessor(**settings)
    _model(dtype=torch.float32).save_pretrained(tmp_path / "emu3")
    processor.save_pretrained(tmp_path / "emu3")
    target = Emu3Image.from_pretrained(tmp_path / "emu3")
    out = mmspec.generate(target, PROMPTS, target.layout(H, W), method="ar", sampling={"top_k": 8}, seed=5)
    decoded = target.decode(out.tokens, H, W)  # [B, 3, 4H, 4W]
    theirs = processor.postprocess(list(decoded.float()), return_tensors="PIL.Image.Image")["pixel_values"]
    assert [png(im) for im in target.images(out.tokens, H, W)] == [png(im) for im in theirs]
    assert not np.array_equal(np.stack([np.array(im) for im in theirs]), rounded(decoded.permute(0, 2, 3, 1)))

"""Janus image generation: greedy equals transformers' own generate with CFG, the exact law holds, errors are clear."""
import functools
import itertools
import json

import numpy as np
import pytest
import torch

import mmspec
from mmspec.adapters.janus import JanusImage
from tiny import (BOI, BOS, PAD, chi_square_pvalue, deepseek_greedy, left_pad, png, reference_p, rounded, sequence_id,
                  tiny_head, tiny_janus)

METHODS = ["ar", "jacobi", "coupled", "gumbel", "exact", "lookup", "draft-model", "pac", "eagle"]


@functools.lru_cache(maxsize=None)
def _model(**kw):
    return tiny_janus(**kw)


def _method(name, **kw):
    if name == "draft-model":
        return {"name": "draft-model", "model": JanusImage(tiny_janus(layers=1, seed=5, **kw))}
    if name == "eagle":  # a random head over the session's features (hidden_states 0, 1, 1) and embeddings
        vocab = JanusImage(_model(**kw)).vocab_size
        return {"name": "eagle", "head": tiny_head(vocab, 32, layers=(0, 1, 1), rope_axes=2, seed=5)}
    return name


PROMPTS = [[BOS, 10, 11, 12, BOI], [BOS, 20, 21, 5, 22, 23, 24, BOI]]


@functools.lru_cache(maxsize=None)
def hf_greedy(batch: int, scale: float) -> torch.Tensor:
    """transformers' Janus generate on a left-padded batch (pad tokens masked out)."""
    ids, mask = left_pad(PROMPTS[:batch], PAD)
    return _model().generate(ids, attention_mask=mask, generation_mode="image", do_sample=False,
                             guidance_scale=scale)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_equals_transformers_generate(method, batch):
    target = JanusImage(_model())
    got = mmspec.generate(target, PROMPTS[:batch], target.layout(), method=_method(method), window=5,
                          sampling={"temperature": 0, "cfg_scale": 5.0})
    assert torch.equal(got.tokens, hf_greedy(batch, 5.0))


def test_padded_batch_rows_equal_their_own_runs():
    """Left padding changes nothing: each row of the batch is its own batch-1 generation, in HF and here."""
    one = torch.cat([_model().generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                       generation_mode="image", do_sample=False, guidance_scale=5.0)
                     for p in PROMPTS])
    assert torch.equal(one, hf_greedy(2, 5.0))


def test_null_prompt_pads_every_token_between_the_first_and_the_last():
    """deepseek's rule is by position: a BOI in the text is padded, a first token that is not BOS is kept."""
    target = JanusImage(_model())
    assert target.null_prompt(torch.tensor([BOS, 10, BOI, 11, BOI])).tolist() == [BOS, PAD, PAD, PAD, BOI]
    assert target.null_prompt(torch.tensor([10, BOS, 11, BOI])).tolist() == [10, PAD, PAD, BOI]


@pytest.mark.parametrize("prompt", [[BOS, 10, BOI, 11, BOI], [10, BOS, 11, BOI]], ids=["boi-in-text", "bos-second"])
@pytest.mark.parametrize("method", ["ar", "coupled", "exact"])
def test_greedy_equals_deepseeks_generate_at_another_size(prompt, method):
    """img_size / image_token_num_per_image as deepseek's generate takes them (a 3 x 3 grid of a model whose own is
    4 x 4), on prompts where deepseek's positional null prompt and transformers' by-id one differ."""
    target = JanusImage(_model())
    layout = target.layout(img_size=3 * target.patch_size)
    assert {(g.h, g.w) for g in (layout, target.layout(image_token_num_per_image=9), target.layout(6, 9))} == {(3, 3)}
    got = mmspec.generate(target, [prompt], layout, method=_method(method), window=4,
                          sampling={"temperature": 0, "cfg_scale": 5.0})
    assert torch.equal(got.tokens, deepseek_greedy(_model(), prompt, 5.0, 3))
    assert target.images(got.tokens)[0].size == (6, 6)


def _law(model, prompt, m, s: mmspec.Sampling, null=None):
    """Exact law of the first m image tokens, from plain teacher-forced forwards of cond and uncond prompts."""
    V = model.model.generation_head.vision_head.out_features
    null = null or [prompt[0]] + [PAD] * (len(prompt) - 2) + [prompt[-1]]
    seqs = torch.tensor(list(itertools.product(range(V), repeat=m)))  # [V^m, m]
    logits = []
    with torch.no_grad():
        for ids in (prompt, null):
            text = model.get_input_embeddings()(torch.tensor(ids)).expand(len(seqs), -1, -1)
            image = model.prepare_embeddings_for_image_generation(seqs[:, :-1])
            h = model.model.language_model(inputs_embeds=torch.cat([text, image], 1)).last_hidden_state
            logits.append(model.model.generation_head(h[:, len(ids) - 1:]))  # [V^m, m, V]
    law = torch.zeros(V ** m, dtype=torch.float64)
    for row, seq in enumerate(seqs):
        law[sequence_id(seq, V)] = torch.prod(torch.stack([reference_p(logits[0][row, i], logits[1][row, i], s)[seq[i]]
                                                           for i in range(m)]))
    return law


def _stop_after(length):
    """End each row once it has `length` tokens: later positions cannot change the law of the first ones."""
    def on_commit(state, k):
        n = state.n  # (read once: a request's rows gather theirs at every read)
        for row in (state.active & (n >= length)).nonzero().flatten().tolist():
            state.finish(row, int(n[row]))
    return on_commit


@pytest.mark.parametrize("method", METHODS)
def test_distribution_of_the_first_tokens(method):
    """The first 3 of a 2x2 grid's tokens follow the exact CFG law (6 codes: 216 cells, 20,000 samples)."""
    V, m, prompt = 6, 3, [BOS, 10, 11, BOI]
    model = _model(n=2, codes=V, layers=1, dtype=torch.float32)
    s = mmspec.Sampling(temperature=0.9, top_k=4, cfg_scale=3.0)
    law = _law(model, prompt, m, s)
    method = _method(method, n=2, codes=V, dtype=torch.float32)
    target = JanusImage(model)
    out = mmspec.generate(target, [prompt], target.layout(), method=method, window=3, sampling=s,
                          num_samples=20_000, seed=1, on_commit=_stop_after(m))
    cells = sequence_id(out.tokens[:, :m], V)
    assert chi_square_pvalue(cells, law) > 1e-3
    if method == "ar":  # the test has the power to tell a null prompt that also pads BOS and BOI
        assert chi_square_pvalue(cells, _law(model, prompt, m, s, null=[PAD] * len(prompt))) < 1e-6


def test_decode_and_loading_from_a_local_folder(tmp_path):
    model = tiny_janus(dtype=torch.float32)
    # a generation config derived from the model config drops extra keys such as generation_kwargs on loading
    model.generation_config._from_model_config = False
    model.save_pretrained(tmp_path / "janus")
    target = JanusImage.from_pretrained(tmp_path / "janus")
    assert (target.bos_token_id, target.pad_token_id, target.boi_token_id) == (BOS, PAD, BOI)
    out = mmspec.generate(target, PROMPTS, target.layout(), method="coupled", window=6, sampling={"cfg_scale": 5.0},
                          seed=3)
    direct = JanusImage(model)
    assert torch.equal(out.tokens, mmspec.generate(direct, PROMPTS, direct.layout(), method="coupled", window=6,
                                                   sampling={"cfg_scale": 5.0}, seed=3).tokens)
    images = target.decode(out.tokens)
    assert images.shape == (2, 8, 8, 3) and torch.isfinite(images).all()

    with pytest.raises(FileNotFoundError, match="no folder"):
        JanusImage.from_pretrained(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    model.config.save_pretrained(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="safetensors"):
        JanusImage.from_pretrained(tmp_path / "empty")
    (tmp_path / "llama").mkdir()
    cfg = json.loads((tmp_path / "janus" / "config.json").read_text())
    (tmp_path / "llama" / "config.json").write_text(json.dumps(cfg["text_config"]))
    (tmp_path / "llama" / "model.safetensors").write_bytes((tmp_path / "janus" / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="not supported"):
        JanusImage.from_pretrained(tmp_path / "llama")


def test_janus_errors():
    target = JanusImage(_model())
    greedy = {"temperature": 0, "cfg_scale": 5.0}
    for layout in [mmspec.Grid2D(2, 8), mmspec.Grid2D(4, 4, row_end_token=7), mmspec.Sequence1D(16)]:
        with pytest.raises(ValueError, match=r"n x n grid of image tokens"):
            mmspec.generate(target, PROMPTS, layout, sampling=greedy)
    sizes = (r"this Janus model makes square images of n x n tokens of 2 pixels, n from 1 to 22 .*: "
             r"img_size 2, 4, \.\.\., 44, ")
    for size, said in [({"img_size": 5}, "^img_size 5: " + sizes), ({"img_size": 46}, sizes),
                       ({"img_size": 8, "image_token_num_per_image": 9}, "4 x 4"),
                       ({"image_token_num_per_image": 8}, "^image_token_num_per_image 8: " + sizes)]:
        with pytest.raises(ValueError, match=said):
            target.layout(**size)
    # the prompt's tokens count: 22 x 22 after 1 token, 21 x 21 after 30, and a longer prompt at run time is refused
    assert target.layout(img_size=44).length == 484
    with pytest.raises(ValueError, match=r"n from 1 to 21 \(a prompt of 30\+ tokens, then n \* n, within its 512 "):
        target.layout(img_size=44, prompt=30)
    with pytest.raises(ValueError, match=r"a prompt of 30 tokens and an image of 484 tokens .* img_size at most 42 "):
        mmspec.generate(target, [[BOS, *[10] * 28, BOI]], target.layout(img_size=44), sampling=greedy)
    with pytest.raises(ValueError, match="BOI"):
        mmspec.generate(target, [[BOS, 10, 11]], target.layout(), sampling=greedy)
    model = tiny_janus(n=2)
    model.generation_config.pad_token_id = None
    no_pad = JanusImage(model)
    with pytest.raises(ValueError, match="pad_token_id"):
        mmspec.generate(no_pad, PROMPTS, no_pad.layout(), sampling=greedy)
    out = mmspec.generate(no_pad, PROMPTS, no_pad.layout(), sampling={"temperature": 0})  # no CFG: no null prompt
    assert out.tokens.shape == (2, 4)
    odd = JanusImage(tiny_janus(n=2))
    odd.model.model.vision_model.config.num_image_tokens = 5
    with pytest.raises(ValueError, match="image_token_num_per_image 5: " + sizes):
        odd.layout()


def test_images_hold_the_bytes_deepseeks_code_writes():
    """Same tokens -> deepseek's cast (generation_inference.py, restated): the decoder's output made fp32, numpy's
    clip((dec + 1) / 2 * 255, 0, 255) assigned into a uint8 array -> the same PNG bytes."""
    target = JanusImage(tiny_janus(dtype=torch.float32))
    tokens = torch.randint(target.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
    assert torch.equal(target.decode(tokens), target.model.decode_image_tokens(tokens))  # (at the config's size)
    dec = target.decode(tokens).to(torch.float32).cpu().numpy()  # [B, H, W, 3] (deepseek's, after its transpose)
    dec = np.clip((dec + 1) / 2 * 255, 0, 255)
    visual = np.zeros(dec.shape, dtype=np.uint8)
    visual[:, :, :] = dec
    assert [png(im) for im in target.images(tokens)] == [png(v) for v in visual]
    assert not np.array_equal(visual, rounded(target.decode(tokens)))


def test_a_longer_prompt_joins_a_running_engine_and_every_request_keeps_its_tokens_alone():
    """The engine's wave opened on the shorter prompt; the longer one joins it mid-run (the wave's rows, CFG's null
    rows too, left-padded to it), and each gets its tokens alone with its seed."""
    from mmspec.engine import Engine
    from mmspec.plan import plan

    target = JanusImage(_model())
    s = mmspec.Sampling(temperature=0.9, top_k=8, cfg_scale=3.0)
    engine, tickets = Engine(target, target.layout(), plan("exact", 4), s, slots=3), []

    def arrives(rows, k):
        if rows.step == 1 and len(tickets) == 1:
            tickets.append(engine.submit([PROMPTS[1]], num_outputs=2, seed=7))
    tickets.append(engine.submit([PROMPTS[0]], seed=3, on_commit=arrives))
    engine.run_until_idle()
    assert engine.waves == 1 and len(tickets) == 2
    for ticket, prompt, seed, outputs in zip(tickets, PROMPTS, (3, 7), (1, 2)):
        alone = mmspec.generate(target, [prompt], target.layout(), method="ar", sampling=s, seed=seed,
                                num_outputs=outputs).tokens
        assert torch.equal(ticket.result().tokens, alone)

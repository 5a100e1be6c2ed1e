"""Chameleon image generation (Lumina-mGPT, Anole): greedy equals transformers' generate with logits processors set
up as Lumina-mGPT's inference solver sets them, the exact CFG law holds across a row end, errors are clear."""
import functools
import itertools

import pytest
import torch

import mmspec
from mmspec.adapters.chameleon import ChameleonImage
from lumina import generating, lumina_generate
from tiny import (C_BOI, C_BOS, C_IMAGE0, C_PAD, C_RES1, C_ROW_END, C_SEP, chi_square_pvalue, reference_p,
                  sequence_id, tiny_chameleon)

METHODS = ["ar", "jacobi", "coupled", "gumbel", "exact", "lookup", "pac"]
H, W = 2, 4
PROMPTS = [[C_BOS, 40, 41, 42, C_SEP], [C_BOS, 45, C_SEP]]
START = [C_BOI, C_RES1, C_RES1 + 1]  # BOI, 1 patch high (2 tokens), 2 patches wide (4 tokens)


@functools.lru_cache(maxsize=None)
def _model(**kw):
    return tiny_chameleon(**kw)


@functools.lru_cache(maxsize=None)
def lumina_greedy(row: int, scale: float) -> torch.Tensor:
    """transformers' generate on one prompt ending with the image start, with Lumina-mGPT's processors."""
    return lumina_generate(generating(_model()), PROMPTS[row] + START, _model().model.vocabulary_mapping.image_tokens,
                           H, W, scale, 4)


GREEDY = {"temperature": 0, "cfg_scale": 3.0, "top_k": 4}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_equals_transformers_generate_with_luminas_processors(method, batch):
    target = ChameleonImage(_model())
    got = mmspec.generate(target, PROMPTS[:batch], target.layout(H, W), method=method, window=5, sampling=GREEDY)
    assert torch.equal(got.tokens, torch.cat([lumina_greedy(r, 3.0) for r in range(batch)]))


def test_session_logits_are_transformers_logits_with_generation_on():
    """Teacher-forced on a prompt and 7 generated tokens: the conditional half is transformers' forward on the whole
    sequence, the null half its forward on the image part alone, on image tokens (float64: to rounding)."""
    model = _model()
    target, ref = ChameleonImage(model), generating(model)
    tokens = torch.tensor([[5, 6, 7, 8, C_ROW_END, 9, 4]])
    session = target.session(PROMPTS[:1], target.layout(H, W), cfg=True, max_window=8)
    cond, null = session.forward(torch.cat([torch.full((1, 1), -1), tokens], 1), torch.full((1,), -1))
    prompt = torch.tensor([PROMPTS[0] + START])
    with torch.no_grad():
        c = ref(torch.cat([prompt, tokens], 1)).logits[:, prompt.shape[1] - 1:]
        u = ref(torch.cat([prompt[:, -3:], tokens], 1)).logits[:, 2:]
    image = target.image_tokens
    torch.testing.assert_close(cond[..., image], c[..., image], atol=1e-12, rtol=0)
    torch.testing.assert_close(null[..., image], u[..., image], atol=1e-12, rtol=0)
    assert (cond[..., C_PAD] == -1e9).all()  # no other token can be drawn


def test_exact_equals_ar_when_sampling():
    target = ChameleonImage(_model())
    s = {"temperature": 1.0, "top_k": 4, "cfg_scale": 3.0}
    ar = mmspec.generate(target, PROMPTS, target.layout(H, W), method="ar", sampling=s, seed=7, num_samples=3)
    exact = mmspec.generate(target, PROMPTS, target.layout(H, W), method="exact", window=6, sampling=s, seed=7,
                            num_samples=3)
    assert torch.equal(ar.tokens, exact.tokens)


def _law(model, prompt, null, s: mmspec.Sampling, m):
    """Exact law of the first m free tokens of a 2 x 2 image (they cross a row end): teacher-forced forwards of the
    prompt and the null prompt, logits restricted to image tokens, CFG on them, then temperature and top-k."""
    layout = ChameleonImage(model).layout(2, 2)
    image = model.model.vocabulary_mapping.image_tokens
    model = generating(model)
    C = len(image)
    codes = torch.tensor(list(itertools.product(range(C), repeat=m)))  # [C^m, m]
    free = (layout.forced() < 0).nonzero().flatten()[:m]
    tokens = layout.forced()[: int(free[-1]) + 1].expand(len(codes), -1).clone()
    tokens[:, free] = torch.tensor(image)[codes]
    with torch.no_grad():
        logits = [model(torch.cat([torch.tensor(ids).expand(len(codes), -1), tokens[:, :-1]], 1)).logits
                  [:, len(ids) - 1:][:, free][..., image] for ids in (prompt, null)]  # [C^m, m, C]
    law = torch.zeros(C ** m, dtype=torch.float64)
    for row, seq in enumerate(codes):
        law[sequence_id(seq, C)] = torch.prod(torch.stack([reference_p(logits[0][row, i], logits[1][row, i], s)[seq[i]]
                                                           for i in range(m)]))
    return law


@pytest.mark.parametrize("method", ["ar", "coupled", "exact", "pac"])
def test_distribution_of_the_first_tokens(method):
    """The first 3 free tokens of a 2 x 2 image (a row end between the second and the third) follow the exact CFG
    law (6 codes: 216 cells, 20,000 samples)."""
    model = _model(layers=1, dtype=torch.float32)
    s = mmspec.Sampling(temperature=0.9, top_k=4, cfg_scale=3.0)
    prompt = [C_BOS, 40, 41, C_SEP] + [C_BOI, C_RES1, C_RES1]
    target = ChameleonImage(model)
    out = mmspec.generate(target, [prompt[:4]], target.layout(2, 2), method=method, window=4, sampling=s,
                          num_samples=20_000, seed=1)
    cells = sequence_id(target.codes_of(out.tokens, target.layout(2, 2)).flatten(1)[:, :3], 6)
    assert chi_square_pvalue(cells, _law(model, prompt, prompt[4:], s, 3)) > 1e-3
    if method == "ar":  # the test has the power to tell a null prompt that keeps BOS and pads the text (Janus's)
        wrong = [C_BOS, C_PAD, C_PAD, C_PAD] + prompt[4:]
        assert chi_square_pvalue(cells, _law(model, prompt, wrong, s, 3)) < 1e-6


def test_string_prompts_follow_luminas_instruction():
    from tiny import word_tokenizer

    target = ChameleonImage(_model(), tokenizer=_WordTokenizer(word_tokenizer()))
    ids = target.prompt_ids("w3 w4", target.layout(H, W))[0].tolist()
    assert ids[0] == C_BOS and ids[-3:] == START
    assert target.tokenizer.seen == ["Generate an image of 64x32 according to the following prompt:\nw3 w4<reserved08706>"]


class _WordTokenizer:
    """A tokenizer that records the texts it encodes."""

    def __init__(self, inner):
        self.inner, self.seen = inner, []

    def __call__(self, text, add_special_tokens):
        self.seen.append(text)
        return self.inner("w1", add_special_tokens=add_special_tokens)


def test_chameleon_errors():
    target = ChameleonImage(_model())
    with pytest.raises(ValueError, match="even"):
        target.layout(3, 2)
    with pytest.raises(ValueError, match="resolution tokens"):
        target.layout(6, 2)
    with pytest.raises(ValueError, match="use ChameleonImage.layout"):
        mmspec.generate(target, PROMPTS, mmspec.Grid2D(2, 4), sampling=GREEDY)
    with pytest.raises(ValueError, match="tokenizer"):
        mmspec.generate(target, "a cat", target.layout(H, W), sampling=GREEDY)
    model = tiny_chameleon()
    del model.config.vocabulary_map["<eoss>"]
    with pytest.raises(ValueError, match="eoss"):
        ChameleonImage(model)
    assert C_IMAGE0 in target.image_tokens.tolist()

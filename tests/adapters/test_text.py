"""Text path over transformers causal LMs: greedy equals `model.generate`, the exact law holds, loading is strict."""
import json

import pytest
import torch
from safetensors.torch import save_file

import mmspec
from mmspec import HFCausalLM, generate_text
from tiny import chi_square_pvalue, llama_law, sequence_id, tiny_head, tiny_llama, word_tokenizer

METHODS = ["ar", "jacobi", "coupled", "gumbel", "exact", "lookup", "draft-model", "pac", "eagle"]


def _method(name, vocab=40, dtype=torch.float64):
    if name == "draft-model":
        return {"name": "draft-model", "model": HFCausalLM(tiny_llama(vocab, layers=1, hidden=16, seed=5, dtype=dtype))}
    if name == "eagle":  # a head over the tiny llama's embedding, its first layer's input and its last output
        return {"name": "eagle", "head": tiny_head(vocab, 32, seed=5, dtype=dtype)}
    return name


PROMPTS = [[1, 5, 7, 9, 5, 7], [1, 3], [1, 8, 8, 2, 30]]


def hf_greedy(model, prompt, n):
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(prompt):]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_equals_transformers_generate(method, batch):
    model = tiny_llama()
    prompts = PROMPTS[:batch]
    expected = torch.stack([hf_greedy(model, p, 16) for p in prompts])
    got = mmspec.generate(HFCausalLM(model), prompts, mmspec.Sequence1D(16), method=_method(method), window=5,
                          sampling={"temperature": 0})
    assert torch.equal(got.tokens, expected)


def test_batched_left_padded_generate_agrees_too():
    model = tiny_llama()
    ids = torch.tensor([[0, 0, 0, 1, 3], [1, 8, 8, 2, 30]])
    hf = model.generate(ids, attention_mask=(ids != 0).long(), max_new_tokens=10, do_sample=False, pad_token_id=0)
    got = mmspec.generate(HFCausalLM(model), [[1, 3], [1, 8, 8, 2, 30]], mmspec.Sequence1D(10), method="coupled",
                          window=4, sampling={"temperature": 0})
    assert torch.equal(got.tokens, hf[:, 5:])


@pytest.mark.parametrize("method", METHODS)
def test_distribution_on_a_tiny_llama(method):
    V, N, prompt = 5, 3, [1, 2]
    model = tiny_llama(vocab=V, dtype=torch.float32)
    s = mmspec.Sampling(temperature=0.9, top_k=4)
    law = llama_law(model, prompt, N, s)
    m = _method(method, vocab=V, dtype=torch.float32)
    out = mmspec.generate(HFCausalLM(model), [prompt], mmspec.Sequence1D(N), method=m, window=3, sampling=s,
                          num_samples=20_000)
    assert chi_square_pvalue(sequence_id(out.tokens, V), law) > 1e-3


def test_text_generation_with_eos_stop_strings_and_streaming():
    model = tiny_llama()
    tok = word_tokenizer()
    plain = generate_text(HFCausalLM(model, tok), ["<s> w3 w4", "<s> w9"], 12, method="ar",
                          sampling={"temperature": 0})
    stop = plain.texts[0].split()[3]  # a word the first row will produce
    streamed: dict[int, str] = {}
    out = generate_text(HFCausalLM(model, tok), ["<s> w3 w4", "<s> w9"], 12, method="coupled", window=4,
                        sampling={"temperature": 0}, stop_strings=[stop],
                        stream=lambda row, text: streamed.__setitem__(row, streamed.get(row, "") + text))
    assert out.texts[0].endswith(stop) and plain.texts[0].startswith(out.texts[0])
    assert streamed[0] == out.texts[0] and streamed[1] == out.texts[1]
    eos_id = int(plain.tokens[1][2])
    model.generation_config.eos_token_id = eos_id
    eos = generate_text(HFCausalLM(model, tok), ["<s> w9"], 12, method="jacobi", sampling={"temperature": 0})
    first = plain.tokens[1].tolist().index(eos_id)
    assert torch.equal(eos.tokens[0], plain.tokens[1][: first + 1])


def test_loading_from_a_local_folder_and_clear_errors(tmp_path):
    model = tiny_llama(dtype=torch.float32)
    model.save_pretrained(tmp_path / "ok")
    word_tokenizer().save_pretrained(tmp_path / "ok")
    target = HFCausalLM.from_pretrained(tmp_path / "ok")
    assert target.tokenizer is not None
    assert generate_text(target, ["<s> w1"], 4, method="coupled").tokens[0].shape == (4,)

    with pytest.raises(FileNotFoundError, match="no folder"):
        HFCausalLM.from_pretrained(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    model.config.save_pretrained(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="safetensors"):
        HFCausalLM.from_pretrained(tmp_path / "empty")
    cfg = json.loads((tmp_path / "ok" / "config.json").read_text())
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 48}))
    (tmp_path / "bad" / "model.safetensors").write_bytes((tmp_path / "ok" / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="do not match"):
        HFCausalLM.from_pretrained(tmp_path / "bad")
    (tmp_path / "vit").mkdir()
    (tmp_path / "vit" / "config.json").write_text(json.dumps({"model_type": "vit"}))
    save_file({"x": torch.zeros(1)}, tmp_path / "vit" / "model.safetensors")
    with pytest.raises(ValueError, match="not supported"):
        HFCausalLM.from_pretrained(tmp_path / "vit")


def test_text_errors():
    target = HFCausalLM(tiny_llama())
    with pytest.raises(ValueError, match="CFG"):
        mmspec.generate(target, [[1, 2]], mmspec.Sequence1D(4), sampling={"cfg_scale": 2.0})
    with pytest.raises(ValueError, match="Sequence1D"):
        mmspec.generate(target, [[1, 2]], mmspec.Grid2D(2, 2))
    with pytest.raises(ValueError, match="tokenizer"):
        mmspec.generate(target, ["hello"], mmspec.Sequence1D(4))

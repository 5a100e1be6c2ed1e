import pytest

from mmspec.pipelines import TextPipeline


def test_text_pipeline_methods_agree_greedily(tiny_text, tmp_path):
    pipe = TextPipeline.from_pretrained(tiny_text / "target", draft=tiny_text / "draft")
    runs = {m: pipe(["<s> w3 w4", "<s> w9"], method=m, window=4, sampling={"temperature": 0}, max_new_tokens=10)
            for m in ("ar", "coupled", "draft-model", "lookup")}
    assert all(r.texts == runs["ar"].texts for r in runs.values())
    assert runs["draft-model"].summary["nfe"] < runs["ar"].summary["nfe"] or runs["ar"].summary["nfe"] <= 2
    paths = runs["ar"].save(tmp_path)
    assert paths[0].read_text() == "<s> w3 w4" + runs["ar"].texts[0]


def test_draft_model_without_a_draft_is_a_clear_error(tiny_text):
    with pytest.raises(ValueError, match="needs a draft model"):
        TextPipeline.from_pretrained(tiny_text / "target")("<s> w1", method="draft-model")


def test_text_output_keeps_token_ids_and_calls_on_commit(tiny_text):
    pipe = TextPipeline.from_pretrained(tiny_text / "target")
    forwards = []
    out = pipe("<s> w3", method="exact", window=3, max_new_tokens=6, on_commit=lambda state, k: forwards.append(k))
    decode = pipe.target.tokenizer.decode
    assert len(out.tokens) == 1 and decode(out.tokens[0].tolist(), skip_special_tokens=True) == out.texts[0]
    assert sum(int(k.sum()) for k in forwards) == len(out.tokens[0])


def test_a_call_s_rows_are_checked_against_memory_before_any_work(tiny_text, monkeypatch, capsys):
    from mmspec import memory
    from mmspec.api import row_need
    from mmspec.layouts import Sequence1D

    pipe = TextPipeline.from_pretrained(tiny_text / "target", window_cache="off")
    short, long = "<s> w3", "<s>" + " w3" * 60
    need = row_need(pipe.target, [short], Sequence1D(6), method="ar", sampling=pipe.default_sampling)
    free = int((memory.fixed_bytes() + 2 * need) / memory.SHARE) + 1  # 2 rows of the short prompt
    monkeypatch.setattr(memory, "free_bytes", lambda device: free)
    monkeypatch.setattr(pipe.target, "session", None)  # any work would fail
    pipe.check_rows([short], 2, method="ar", max_new_tokens=6)
    for prompts, rows, new in (([short], 3, 6), ([short, long], 2, 6), ([short], 2, 100)):  # a longer row needs more
        with pytest.raises(memory.DoesNotFit, match=f"^{rows} rows at a time need about"):
            pipe.check_rows(prompts, rows, method="ar", max_new_tokens=new)
    with pytest.raises(memory.DoesNotFit, match="^3 rows at a time need about"):  # a call: before its progress bar
        pipe([short], num_outputs=3, batch_size=3, method="ar", max_new_tokens=6, progress_bar=True)
    assert capsys.readouterr().err == ""  # (tqdm writes on stderr)

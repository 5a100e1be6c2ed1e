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


def _at_once(pipe, calls):
    """Calls (prompt, max_new_tokens, method) made at once from threads on `pipe` sharing 4 places -> (their token
    ids, the engines they ran in)."""
    import threading

    pipe.share_engines(4)
    out = {}

    def call(i, prompt, count, method):
        out[i] = pipe(prompt, seed=i, max_new_tokens=count, method=method, window=3).tokens[0].tolist()
    threads = [threading.Thread(target=call, args=(i, *c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engines = len(pipe.engines._engines)
    pipe.engines.close()
    pipe.engines = None
    return [out[i] for i in range(len(calls))], engines


def test_calls_asking_for_counts_in_one_span_share_an_engine_with_the_tokens_each_gets_alone(tiny_text):
    """With a method whose tokens do not depend on the windows a call decodes in a layout of the next power of two
    (at least 16) and ends each row at its own count: 5, 12 and 16 tokens share one engine, 30 another."""
    import mmspec
    from mmspec.layouts import Sequence1D

    pipe = TextPipeline.from_pretrained(tiny_text / "target", window_cache="off")
    calls = [("<s> w3 w4", 5, "exact"), ("<s> w9", 12, "exact"), ("<s> w1 w2 w5", 16, "exact"), ("<s> w7", 30, "exact")]
    tokens, engines = _at_once(pipe, calls)
    assert engines == 2
    for i, (prompt, count, _) in enumerate(calls):
        plain = mmspec.generate(pipe.target, [prompt], Sequence1D(count), method="ar", seed=i,
                                sampling=pipe.default_sampling, stop_tokens=pipe.target.eos_token_ids or None)
        assert tokens[i] == plain.tokens[0][:int(plain.lengths[0])].tolist()
        assert len(tokens[i]) <= count


def test_a_method_whose_tokens_follow_its_windows_decodes_in_its_own_count(tiny_text):
    pipe = TextPipeline.from_pretrained(tiny_text / "target", window_cache="off")
    _, engines = _at_once(pipe, [("<s> w3 w4", 5, "coupled"), ("<s> w9", 9, "coupled")])
    assert engines == 2


def test_the_span_stays_within_the_model_s_context(tiny_text):
    """The tiny model reads 128 positions: after a prompt of 101 tokens, 20 new ones decode in a layout of 27, not 32
    (a session of 101 + 32 positions would be refused)."""
    pipe = TextPipeline.from_pretrained(tiny_text / "target", window_cache="off")
    prompt = "<s>" + " w3" * 100
    assert pipe._room([prompt], 20) == 27 and pipe._room(["<s> w3"], 20) == 32
    assert len(pipe(prompt, max_new_tokens=20, method="ar").tokens[0]) <= 20

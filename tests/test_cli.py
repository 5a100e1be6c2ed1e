import json

import pytest

import benchmarks.suite
import mmspec.cli
from benchmarks.suite.__main__ import main as suite_main


def main(argv):
    """mmspec's CLI, with the clone's suites for `bench --suite` (as python -m benchmarks.suite gives them)."""
    return mmspec.cli.main(argv, suites=benchmarks.suite)


def test_generate_image_json(tiny_models, tmp_path, capsys):
    assert main(["generate", "image", "red heart", "--model", str(tiny_models / "image"), "--out", str(tmp_path),
                 "--num", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result["outputs"]) == 2 and all((tmp_path / p.split("/")[-1]).exists() for p in result["outputs"])
    assert {"nfe", "mean_acceptance_length", "seconds"} <= set(result["stats"])


def test_generate_video_and_text(tiny_models, tiny_text, tmp_path, capsys):
    assert main(["generate", "video", "bounce apple", "--model", str(tiny_models / "video"), "--out",
                 str(tmp_path), "--method", "exact", "--window", "3", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["outputs"]) == 2
    assert main(["generate", "text", "<s> w3", "--model", str(tiny_text / "target"), "--out", str(tmp_path),
                 "--max-new-tokens", "5", "--temperature", "0"]) == 0
    assert "<s> w3" in capsys.readouterr().out


def test_bench_reports_ratios_against_ar(tiny_models, tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "image", "--model", str(tiny_models / "image"), "--methods", "coupled,exact",
                 "--window", "6", "--num", "2", "--out", str(out), "--json"]) == 0
    result = json.loads(out.read_text())
    rows = {r["method"]: r for r in result["results"]}
    assert list(rows) == ["ar", "coupled", "exact"] and rows["ar"]["nfe_ratio"] == 1.0
    assert rows["coupled"]["nfe_ratio"] >= 1.0 and rows["exact"]["mean_acceptance_length"] >= 1.0
    assert result["lossless"]["ok"] and result["lossless"]["exact_equals_ar"] == {"identical": 8, "rows": 8, "ties": []}
    assert set(result["lossless"]["greedy"]) == {"coupled", "exact"}
    assert json.loads(capsys.readouterr().out) == {**result, "exit_status": 0}


def test_bench_writes_beside_earlier_results_unless_told_to_overwrite(tiny_models, tmp_path, capsys):
    out = tmp_path / "bench.json"
    run = ["bench", "image", "--model", str(tiny_models / "image"), "--methods", "exact", "--window", "4", "--out", str(out)]
    assert main(run) == main(run) == main([*run, "--overwrite"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench-001.json", "bench.json"]
    printed = capsys.readouterr().out.splitlines()  # each run says where it wrote
    assert [line for line in printed if line.endswith(".json")] == [str(out), str(tmp_path / "bench-001.json"), str(out)]


def test_bench_prints_the_lossless_check_beside_the_figures(tiny_models, capsys):
    assert main(["bench", "video", "--model", str(tiny_models / "video"), "--methods", "exact", "--window", "4"]) == 0
    out = capsys.readouterr().out
    assert "wall ratio" in out and "exact == ar token for token: yes (4/4 rows); greedy agreement with ar: 1/1 methods" in out


def test_a_failed_lossless_check_is_loud_and_fails_the_command(tiny_models, monkeypatch, capsys):
    import mmspec.lossless

    def failing(*args, **kw):
        return {"exact_equals_ar": {"identical": 3, "rows": 4}, "greedy": {"coupled": {"identical": 4, "rows": 4}},
                "ok": False}
    monkeypatch.setattr(mmspec.lossless, "check_lossless", failing)
    assert main(["bench", "image", "--model", str(tiny_models / "image"), "--methods", "coupled", "--window", "4",
                 "--json"]) == 1
    err = capsys.readouterr().err
    assert "LOSSLESS CHECK FAILED" in err and "exact differs from ar on 1 of 4 rows" in err


def test_bench_suite_writes_json_markdown_and_plots(tiny_models, tmp_path, capsys):
    out = tmp_path / "quick"
    assert suite_main(["quick", "image", "--model", str(tiny_models / "image"), "--rows", "1", "--repeats", "1",
                       "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"results.json", "results.md", "batch.png", "window.png"}
    result = json.loads((out / "results.json").read_text())
    assert result["suite"] == "quick" and result["settings"]["models"] == {"image": str(tiny_models / "image")}
    assert {c["case"] for c in result["cases"]} == {"GridCase", "LosslessCase"}
    assert "exact == ar token for token: yes (2/2 rows); greedy agreement with ar: 6/6 methods" in printed


def test_errors_are_reported_not_raised(tmp_path, capsys):
    assert main(["generate", "image", "red heart", "--model", str(tmp_path / "none")]) == 2
    assert "no model folder" in capsys.readouterr().err


def _refused(argv, capsys, message):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "no model folder" not in err, err  # refused before any model was looked for


@pytest.mark.parametrize("argv, message", [
    (["--window", "0"], "--window must be in [1, 256]"),
    (["--window", "300"], "--window must be in [1, 256]"),
    (["--num", "0"], "--num-outputs must be >= 1"),
    (["--init", "diagonal"], "unknown fill policy 'diagonal'"),
    (["--temperature", "nan"], "temperature must be a finite number"),
    (["--cfg-scale", "inf"], "cfg_scale must be a finite number"),
    (["--top-p", "2"], "top_p must be in (0, 1]"),
    (["--method", "draft-model"], "only text has"),
    (["--proactive", "8"], "expected WIDTH,DEPTH"),
    (["--proactive", "1,3"], "proactive drafting needs width >= 2"),
    (["--method", "ar", "--proactive", "4,3"], "bad options ['proactive'] for method 'ar'"),
    (["--method", "coupled", "--exact"], "bad options ['exact'] for method 'coupled'"),
    (["--method", "eagle", "--jacobi", "0"], "jacobi must be the head's slots, an int >= 1"),
    (["--method", "eagle", "--tree", "32,x"], "--tree: expected NODES or NODES,TOP_K"),
    (["--method", "eagle", "--tree", "32,8,2"], "tree must be NODES or [NODES, TOP_K]"),
    (["--method", "eagle", "--tree", "32", "--jacobi", "2"], "token tree takes the whole window"),
    (["--method", "eagle", "--lookup", "--jacobi", "2"], "lookup drafts whole windows"),
    (["--method", "coupled", "--no-lookup"], "bad options ['lookup'] for method 'coupled'"),
    (["--method", "eagle", "--head", "/nonexistent/head"], "EAGLE-3 head: no folder at /nonexistent/head"),
])
def test_bad_options_are_refused_before_models_load(tmp_path, capsys, argv, message):
    _refused(["generate", "image", "red heart", "--model", str(tmp_path / "none"), "--out", str(tmp_path), *argv],
             capsys, message)


def test_generate_with_the_model_folders_head(tiny_heads, tmp_path, capsys):
    assert main(["generate", "image", "red heart", "--model", str(tiny_heads / "image"), "--out", str(tmp_path),
                 "--method", "eagle", "--exact", "--window", "4", "--compare", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["method"] == "eagle" and result["compare"]["identical"]  # --exact: ar's tokens
    assert main(["generate", "video", "bounce apple", "--model", str(tiny_heads / "video"), "--out", str(tmp_path),
                 "--method", "eagle", "--jacobi", "2", "--init", "random", "--window", "5", "--json"]) == 0
    assert main(["generate", "text", "<s> w3", "--model", str(tiny_heads / "text"), "--out", str(tmp_path),
                 "--method", "eagle", "--max-new-tokens", "5", "--json"]) == 0
    capsys.readouterr()
    assert main(["generate", "image", "red heart", "--model", str(tiny_heads / "image"), "--out", str(tmp_path),
                 "--method", "eagle", "--tree", "--window", "4", "--compare", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["method"] == "eagle" and result["compare"]["identical"]  # a tree: ar's tokens


def test_head_names_a_head_folder_for_a_model_without_one(tiny_models, tiny_heads, tmp_path, capsys):
    argv = ["generate", "image", "red heart", "--model", str(tiny_models / "image"), "--out", str(tmp_path),
            "--method", "eagle", "--window", "4", "--json"]
    assert main([*argv, "--head", str(tiny_heads / "image" / "head")]) == 0
    assert json.loads(capsys.readouterr().out)["stats"]["nfe"] >= 1
    assert main(argv) == 2  # without --head: the model folder has none
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--method eagle: method eagle needs a draft head and {tiny_models / 'image'} " \
        "has no head/: train one with `mmspec train-head" in err


def test_bench_runs_eagle_with_the_model_folders_head(tiny_heads, capsys):
    assert main(["bench", "image", "--model", str(tiny_heads / "image"), "--methods", "eagle", "--window", "4",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    greedy = result["lossless"]["greedy"]["eagle"]  # greedy eagle gives plain greedy's tokens
    assert [r["method"] for r in result["results"]] == ["ar", "eagle"] and greedy["identical"] == greedy["rows"] > 0


def test_bench_refuses_eagle_on_a_model_without_a_head(tiny_models, capsys):
    _refused(["bench", "image", "--model", str(tiny_models / "image"), "--methods", "coupled,eagle"], capsys,
             "--methods eagle: method eagle needs a draft head")


def test_unwritable_out_is_refused_before_models_load(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    _refused(["generate", "image", "red heart", "--model", str(tmp_path / "none"), "--out", str(blocker / "out")],
             capsys, "cannot write to --out")


@pytest.mark.parametrize("argv, message", [
    (["bench"], "mmspec bench needs a kind (image, video, text) or --suite NAME"),
    (["bench", "image", "--rows", "1,2"], "--rows is for --suite"),
    (["bench", "--suite", "quick", "--model", "{tmp}/none"], "needs the model's kind"),
    (["bench", "image", "--suite", "quick", "--window", "4", "--temperature", "0"],
     "--window, --temperature: not for --suite"),
    (["bench", "image", "--suite", "quick", "--draft", "{tmp}"], "takes no draft (a text model's draft model)"),
    (["bench", "video", "--suite", "quick", "--image", "{tmp}/file"], "--image: not for --suite"),
    (["bench", "image", "--suite", "quick", "--model", "{tmp}/none", "--method", "eagle", "--exact", "--jacobi", "2"],
     "--exact, --jacobi: not for --suite"),
    (["bench", "--suite", "quick", "--threads", "0"], "--threads must be >= 1"),
    (["bench", "--suite", "quick", "--device", "tpu9"], "--device: unknown device 'tpu9'"),
    (["bench", "--suite", "quick", "--out", "{tmp}/file/out"], "cannot write to --out"),
])
def test_bench_suite_refuses_bad_options_before_any_work(tmp_path, capsys, argv, message):
    (tmp_path / "file").write_text("not a folder")
    _refused([a.format(tmp=tmp_path) for a in argv], capsys, message)


def test_bench_refuses_a_missing_model_folder_before_any_work(tmp_path, capsys):
    assert main(["bench", "text", "--suite", "quick", "--model", str(tmp_path / "none")]) == 2
    assert f"--model: no model folder at {tmp_path / 'none'}" in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal where there is no CUDA")
def test_bench_refuses_cuda_where_there_is_none(capsys):
    _refused(["bench", "--suite", "quick", "--device", "cuda"], capsys, "no CUDA device here")


def test_the_package_runs_no_suite_of_its_own(capsys):
    # the suites are a clone's benchmarks/ (a wheel has none): without them, bench --suite says where they run
    assert mmspec.cli.main(["bench", "--suite", "quick"]) == 2
    assert "python -m benchmarks.suite quick [KIND] [options] in a clone" in capsys.readouterr().err


def test_bench_refuses_an_unknown_suite(capsys):
    _refused(["bench", "image", "--suite", "slow"], capsys, "unknown suite 'slow'; choose one of ['acceptance', 'overhead', 'quick']")


@pytest.mark.parametrize("argv, message", [(["--suite", "quick", "--rows", "1,x"], "expected batch sizes like 1,4,8"),
                                           (["--rows", "0"], "expected batch sizes like 1,4,8")])
def test_bench_argument_errors_exit_before_any_work(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "image", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_bench_refuses_unknown_methods_before_models_load(tmp_path, capsys):
    _refused(["bench", "image", "--model", str(tmp_path / "none"), "--methods", "coupled,fast"], capsys,
             "unknown --methods ['fast']")


def test_compare_runs_ar_with_the_same_seed_and_exact_gives_the_same_tokens(tiny_models, tmp_path, capsys):
    assert main(["generate", "image", "red heart", "--model", str(tiny_models / "image"), "--out", str(tmp_path),
                 "--method", "exact", "--window", "4", "--compare", "--json"]) == 0
    c = json.loads(capsys.readouterr().out)["compare"]
    assert c["identical"] and c["ar"]["nfe_per_row"] == 16 and c["method"]["nfe_per_row"] <= 16
    assert c["speedup"] > 0 and c["nfe_ratio"] >= 1
    assert main(["generate", "image", "red heart", "--model", str(tiny_models / "image"), "--out", str(tmp_path),
                 "--method", "exact", "--window", "4", "--compare"]) == 0
    assert "identical tokens, as exact promises" in capsys.readouterr().out


def test_missing_bundled_models_say_what_to_do(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MMSPEC_MODELS", str(tmp_path / "nowhere"))
    assert main(["generate", "image", "red heart", "--out", str(tmp_path)]) == 2
    assert "pip install -e ." in capsys.readouterr().err


def test_text_longer_than_the_context_is_refused_with_the_numbers(tiny_text, tmp_path, capsys):
    assert main(["generate", "text", "<s> w3", "--model", str(tiny_text / "target"), "--out", str(tmp_path),
                 "--max-new-tokens", "100000"]) == 2
    err = capsys.readouterr().err
    assert "+ 100000 new tokens" in err and "context of 128 (max_position_embeddings)" in err


def test_window_auto_keeps_exact_equal_to_ar(tiny_models, tmp_path, capsys):
    assert main(["generate", "image", "red heart", "--model", str(tiny_models / "image"), "--out", str(tmp_path),
                 "--method", "exact", "--window", "auto", "--compare", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compare"]["identical"]


def test_window_must_be_an_int_or_auto(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "image", "red heart", "--window", "wide"])
    assert "expected an int in [1, 256] or 'auto'" in capsys.readouterr().err


def test_video_from_an_image_file(tiny_models, tmp_path, capsys):
    from PIL import Image

    Image.new("RGB", (8, 8), (200, 30, 30)).save(tmp_path / "first.png")
    assert main(["generate", "video", "bounce apple", "--model", str(tiny_models / "video"), "--out", str(tmp_path),
                 "--image", str(tmp_path / "first.png"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outputs"]
    _refused(["generate", "video", "x", "--model", str(tmp_path / "none"), "--out", str(tmp_path), "--image",
              str(tmp_path / "missing.png")], capsys, "--image: no file at")


def test_bench_video_from_an_image_file_counts_the_frames_after_it(tiny_models, tmp_path, capsys):
    """Image-to-video as users run it: frame 0 is the picture, and no method (nor ar) spends forwards on it."""
    from PIL import Image

    Image.new("RGB", (8, 8), (200, 30, 30)).save(tmp_path / "first.png")
    assert main(["bench", "video", "--model", str(tiny_models / "video"), "--methods", "exact", "--window", "4",
                 "--image", str(tmp_path / "first.png"), "--prompt", "bounce apple", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = {r["method"]: r for r in result["results"]}
    frame = 4  # tokens of the tiny video model's frame 0: taken with the first free token in one forward
    assert rows["ar"]["nfe_per_row"] == rows["ar"]["tokens_per_row"] - frame
    assert result["lossless"]["ok"]


def test_a_bad_proactive_shape_for_draft_model_is_refused_before_models_load(tmp_path, capsys):
    _refused(["generate", "text", "def f():", "--model", str(tmp_path / "none"), "--method", "draft-model",
              "--proactive", "1,2"], capsys, "proactive drafting needs width >= 2")

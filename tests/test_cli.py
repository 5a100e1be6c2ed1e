import json

from mmspec.cli import main


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
    assert json.loads(capsys.readouterr().out) == result


def test_errors_are_reported_not_raised(tmp_path, capsys):
    assert main(["generate", "image", "red heart", "--model", str(tmp_path / "none")]) == 2
    assert "no model folder" in capsys.readouterr().err

"""The field's table: prompt files (text, PartiPrompts TSV), the figures against AR, and `mmspec bench --model FOLDER
--prompts FILE` on a tiny Chameleon folder on a CPU."""
import json
import time

import pytest

from mmspec.cli import main
from mmspec.tables import PromptFile
from tiny import tiny_chameleon_folder


def test_prompt_files(tmp_path):
    (tmp_path / "p.txt").write_text("a red cat\n\n  a dog \n")
    assert PromptFile(tmp_path / "p.txt").items() == ["a red cat", "a dog"]
    (tmp_path / "parti.tsv").write_text("Prompt\tCategory\tChallenge\tNote\nbird\tAnimals\tBasic\t\n"
                                        "a tall tower\tArchitecture\tBasic\t\nsun\tWorld\tBasic\t\n")
    assert PromptFile(tmp_path / "parti.tsv", limit=2).items() == ["bird", "a tall tower"]
    (tmp_path / "bad.tsv").write_text("Text\tCategory\nbird\tAnimals\n")
    with pytest.raises(ValueError, match="'Prompt' column"):
        PromptFile(tmp_path / "bad.tsv")
    (tmp_path / "empty.txt").write_text("\n")
    with pytest.raises(ValueError, match="no prompt"):
        PromptFile(tmp_path / "empty.txt")
    with pytest.raises(FileNotFoundError, match="no file"):
        PromptFile(tmp_path / "missing.txt")


def test_bench_table_on_a_tiny_chameleon_folder(tmp_path, capsys):
    """Three prompts on a CPU, well under 2 minutes (the issue's bound): figures against AR, exact's tokens AR's."""
    folder = tmp_path / "model"
    tiny_chameleon_folder(folder, image_size=64)  # 4 x 4 tokens: 21 a row with row ends and EOI
    (tmp_path / "prompts.txt").write_text("a red cat\na dog\na tall tower\n")
    started = time.perf_counter()
    status = main(["bench", "--model", str(folder), "--prompts", str(tmp_path / "prompts.txt"), "--out",
                   str(tmp_path / "table"), "--window", "4", "--threads", "1"])
    seconds = time.perf_counter() - started
    assert status == 0 and seconds < 120
    result = json.loads((tmp_path / "table" / "table.json").read_text())
    rows = {r["name"]: r for r in result["rows"]}
    assert list(rows) == ["ar", "jacobi", "coupled", "gumbel", "pac", "exact"]
    # AR: a forward per image token (a row end rides with the token after it), and one for EOI
    assert rows["ar"]["steps_compression"] == 1 and rows["ar"]["steps_per_input"] == 4 * 4 + 1
    assert rows["exact"]["identical_inputs"] == 3 and all(r["inputs"] == 3 for r in rows.values())
    assert all(r["steps_compression"] >= 1 and r["mean_acceptance_length"] >= 1 for r in rows.values())
    markdown = (tmp_path / "table" / "table.md").read_text()
    assert "| SJD-PAC (`pac`) | 4 |" in markdown and "Acceleration (steps)" in markdown
    assert "SJD-PAC" in capsys.readouterr().out


@pytest.mark.parametrize("argv, said", [(["--prompts", "P"], "--model FOLDER"),
                                        (["--model", "M", "--prompts", "P", "--suite", "quick"], "no --suite"),
                                        (["video", "--model", "M", "--prompts", "P"], "runs image models")])
def test_bench_table_option_errors(argv, said, capsys):
    assert main(["bench", *argv]) == 2
    assert said in capsys.readouterr().err

"""What a user meets at the command line: nothing already written is lost, and every bad input or environment is
one line and an exit status before any work."""
import json

from mmspec.cli import main


def _generate(tiny_models, out, *extra):
    return main(["generate", "image", "red heart", "--model", str(tiny_models / "image"), "--out", str(out), "--json",
                 *extra])


def test_a_second_run_into_the_same_folder_keeps_the_first_s_files(tiny_models, tmp_path, capsys):
    assert _generate(tiny_models, tmp_path, "--num", "2") == 0
    first = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    capsys.readouterr()
    assert _generate(tiny_models, tmp_path, "--seed", "5") == 0
    assert [p.split("/")[-1] for p in json.loads(capsys.readouterr().out)["outputs"]] == ["image_002.png"]
    assert all((tmp_path / name).read_bytes() == data for name, data in first.items())
    assert _generate(tiny_models, tmp_path, "--seed", "5", "--overwrite") == 0
    assert [p.split("/")[-1] for p in json.loads(capsys.readouterr().out)["outputs"]] == ["image_000.png"]
    assert (tmp_path / "image_000.png").read_bytes() == (tmp_path / "image_002.png").read_bytes()

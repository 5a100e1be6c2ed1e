"""What a user meets at the command line: nothing already written is lost, and every bad input or environment is
one line and an exit status before any work."""
import json

import pytest

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


def _one_line(capsys, *parts) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert all(part in err for part in parts), err
    return err


@pytest.mark.parametrize("extra, message", [
    (["--seed", str(2 ** 64)], "--seed must be in [0, 2**63-1]"),
    (["--seed", "-1"], "--seed must be in [0, 2**63-1]"),
    (["--seed", str(2 ** 63 - 1), "--num", "2"], "(seed + 1 at --num-outputs 2)"),
])
def test_seeds_that_would_wrap_are_refused_before_models_load(tmp_path, capsys, extra, message):
    argv = ["generate", "image", "red heart", "--model", str(tmp_path / "none"), "--out", str(tmp_path / "out")]
    assert main([*argv, *extra]) == 2
    _one_line(capsys, message)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_library_refuses_seeds_that_would_wrap():
    import torch

    from tiny import tiny_gpt
    import mmspec

    for seed in (2 ** 64, -1, [0, 2 ** 63]):
        with pytest.raises(ValueError, match=r"row seeds must be in \[0, 2\*\*63-1\]"):
            mmspec.generate(mmspec.ReferenceTarget(tiny_gpt()), torch.tensor([0]), mmspec.Grid2D(2, 2), seed=seed,
                            num_samples=2 if isinstance(seed, list) else 1)


def test_ctrl_c_is_one_line_exit_130_and_leaves_no_partial_file(tiny_models, tmp_path, capsys, monkeypatch):
    from mmspec.pipelines.grid import ImageOutput

    assert _generate(tiny_models, tmp_path) == 0
    kept = (tmp_path / "image_000.png").read_bytes()
    capsys.readouterr()
    real = ImageOutput.save

    def interrupted_save(self, folder, *args, **kw):  # Ctrl-C while the second image is being written
        images = self.images
        self.images = [images[0], _Interrupting()]
        return real(self, folder, *args, **kw)
    monkeypatch.setattr(ImageOutput, "save", interrupted_save)
    assert _generate(tiny_models, tmp_path, "--num", "2", "--overwrite") == 130
    _one_line(capsys, "mmspec: interrupted: no partial file was written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["image_000.png"]
    assert (tmp_path / "image_000.png").read_bytes() == kept  # (the same seed's image, written whole)
    with pytest.raises(KeyboardInterrupt):  # --debug: the exception itself, with its traceback
        _generate(tiny_models, tmp_path, "--debug")


class _Interrupting:
    def save(self, path):
        with open(path, "wb") as f:
            f.write(b"\x89PNG half")
        raise KeyboardInterrupt



@pytest.mark.parametrize("argv", [["generate", "image", ""], ["generate", "text", "  \n"],
                                  ["bench", "image", "--prompt", "red heart", "--prompt", " "]])
def test_an_empty_prompt_is_refused_before_models_load(tmp_path, capsys, argv):
    assert main([*argv, "--model", str(tmp_path / "none"), "--out", str(tmp_path / "out")]) == 2
    _one_line(capsys, "the prompt is empty: say what to generate")


def test_more_outputs_than_fit_run_in_batches_and_a_batch_that_cannot_fit_is_refused(tiny_models, tmp_path, capsys,
                                                                                        monkeypatch):
    import mmspec.api
    from mmspec import memory
    from mmspec.layouts import Grid2D
    from mmspec.pipelines import ImagePipeline

    pipe = ImagePipeline.from_pretrained(tiny_models / "image", window_cache="off")
    per_row = memory.row_bytes(pipe.target, None, Grid2D(4, 4), cfg=True, window=16)
    monkeypatch.setattr(memory, "free_bytes", lambda device: 2 * (memory.fixed_bytes() + 3 * per_row))
    rows = []  # rows at a time, as planned
    monkeypatch.setattr(mmspec.api, "rows_at_once", lambda *a, **kw: rows.append(memory.rows_at_once(*a, **kw)) or rows[-1])
    assert _generate(tiny_models, tmp_path, "--num", "7", "--window", "16") == 0
    assert len(json.loads(capsys.readouterr().out)["outputs"]) == 7 and rows == [3]
    assert _generate(tiny_models, tmp_path / "b", "--num", "7", "--window", "16", "--batch-size", "5") == 2
    _one_line(capsys, "5 rows at a time need about", "which holds 3 rows: pass batch_size=3 (CLI: --batch-size 3)")
    assert not (tmp_path / "b").exists()
    argv = ["generate", "image", "red heart", "--model", str(tiny_models / "image"), "--num", "7", "--window", "16",
            "--batch-size", "5", "--threads", "1"]  # (no --json: the progress bar's run)
    assert main([*argv, "--out", str(tmp_path / "b" / "c")]) == 2
    assert capsys.readouterr().err.startswith("mmspec: error: 5 rows at a time need about")  # (one line: below)
    assert not (tmp_path / "b").exists()
    assert _generate(tiny_models, tmp_path / "c", "--batch-size", "0") == 2
    _one_line(capsys, "--batch-size must be >= 1, got 0")


@pytest.mark.parametrize("kind, model, prompt", [("image", "image", "red heart"), ("video", "video", "bounce apple"),
                                                  ("video", "video-from-text", "red heart"), ("text", None, "<s> w3")])
@pytest.mark.parametrize("compare", [False, True])
def test_a_request_that_does_not_fit_leaves_no_folder_and_prints_only_its_line(tiny_models, tiny_text, tmp_path,
                                                                               capsys, monkeypatch, kind, model, prompt,
                                                                               compare):
    from mmspec import memory

    monkeypatch.setattr(memory, "free_bytes", lambda device: 2 * memory.fixed_bytes())  # not even one row
    folder = tiny_models / model if model else tiny_text / "target"
    argv = ["generate", kind, prompt, "--model", str(folder), "--max-new-tokens", "5", "--threads", "1",
            *["--compare"] * compare]  # (no --json: the progress bar's run)
    assert main([*argv, "--out", str(tmp_path / "new" / "out")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("mmspec: error: 1 row at a time needs about"), err  # (tqdm writes on stderr)
    assert "which holds not even one row" in err and len(err.splitlines()) == 1 and "\r" not in err, err
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / f"{kind}_000.txt").write_bytes(b"an earlier output")
    assert main([*argv, "--out", str(kept)]) == 2
    assert [p.name for p in kept.iterdir()] == [f"{kind}_000.txt"]
    assert (kept / f"{kind}_000.txt").read_bytes() == b"an earlier output"


def test_every_option_of_every_command_says_what_it_does():
    import argparse

    from mmspec.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    bare = [f"{name} {a.option_strings or a.dest}" for name, p in commands.items() for a in p._actions
            if not a.help and not isinstance(a, argparse._HelpAction)]
    assert bare == []


def test_one_name_per_option_with_the_old_names_kept_for_a_release(tiny_models, tmp_path, capsys):
    import warnings

    import torch

    import mmspec
    from mmspec.cli import build_parser
    from tiny import tiny_gpt

    assert build_parser().parse_args(["generate", "image", "x", "--num", "3"]).num == 3
    assert build_parser().parse_args(["generate", "image", "x", "--num-outputs", "3"]).num == 3
    target, layout = mmspec.ReferenceTarget(tiny_gpt()), mmspec.Grid2D(2, 2)
    new = mmspec.generate(target, torch.tensor([0]), layout, num_outputs=2)
    with pytest.warns(DeprecationWarning, match="num_samples is the old name of num_outputs"):
        old = mmspec.generate(target, torch.tensor([0]), layout, num_samples=2)
    assert torch.equal(new.tokens, old.tokens) and new.tokens.shape[0] == 2
    with pytest.raises(ValueError, match="give num_outputs or its old name num_samples, not both"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mmspec.generate(target, torch.tensor([0]), layout, num_outputs=2, num_samples=2)


def test_an_option_before_the_command_is_told_where_it_goes(capsys):
    assert main(["--model", "DIR", "generate", "image", "red heart"]) == 2
    _one_line(capsys, "mmspec: error: --model goes after the command: mmspec generate --model ...")


def test_a_negative_cfg_scale_is_refused_before_models_load(tmp_path, capsys):
    assert main(["generate", "image", "red heart", "--model", str(tmp_path / "none"), "--cfg-scale", "-2"]) == 2
    _one_line(capsys, "--cfg-scale must be >= 0", "got -2")


@pytest.mark.parametrize("size", [(1, 1), (5000, 5000), (1, 40)])
def test_a_first_frame_far_from_the_frame_s_size_is_refused_in_one_line(tiny_models, tmp_path, capsys, size):
    from PIL import Image

    Image.new("RGB", size).save(tmp_path / "frame.png")
    assert main(["generate", "video", "bounce apple", "--model", str(tiny_models / "video"), "--image",
                 str(tmp_path / "frame.png"), "--out", str(tmp_path / "out")]) == 2
    _one_line(capsys, f"image is {size[0]}x{size[1]} pixels: this model's frames are 4x4, so give a picture between "
                      "2x2 and 4096x4096")
    assert not (tmp_path / "out").exists()

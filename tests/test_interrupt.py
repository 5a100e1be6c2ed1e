"""Ctrl-C at any moment of `mmspec generate`: exit 130, one line, no partial file, within seconds (real processes;
render jobs: tests/render/test_run.py, the demo: tests/demo/test_command.py)."""
import pytest

from interrupting import Command, no_partial_file

MOMENTS = {  # what shows that the command is at the moment
    "start-up, importing torch": lambda c: c.mapped("libtorch_cpu"),
    "loading the models' libraries": lambda c: c.mapped("_safetensors_rust"),
    "decoding": lambda c: b"tok/s" in c.err,
}


@pytest.mark.parametrize("moment", MOMENTS)
def test_ctrl_c_at_any_moment_of_generate(moment, tmp_path):
    Command(["generate", "image", "red heart", "--num-outputs", "64", "--out", "out"], tmp_path).when(
        MOMENTS[moment]).interrupt()
    assert not (tmp_path / "out").exists() or no_partial_file(tmp_path / "out")


def test_a_video_stopped_while_its_frames_are_drawn_leaves_no_partial_file(tmp_path):
    Command(["generate", "video", "bounce red apple", "--num-outputs", "8", "--out", "out"], tmp_path).when(
        lambda c: b"VideoPipeline" in c.err).interrupt()
    assert not (tmp_path / "out").exists() or no_partial_file(tmp_path / "out")


def test_a_swallowed_ctrl_c_still_ends_the_process(tmp_path):
    """A library's bare `except:` that takes the KeyboardInterrupt (once, a run interrupted while it loaded went on
    to its end): the handler's timer ends the process."""
    code = ("import time\nfrom mmspec import interrupt\ninterrupt.install()\nprint('ready', flush=True)\n"
            "while True:\n    try:\n        time.sleep(10)\n    except:\n        pass\n")
    Command([], tmp_path, program=("-c", code)).when(lambda c: b"ready" in c.out).interrupt()


def test_the_line_is_said_on_a_line_of_its_own_while_a_progress_bar_holds_one(capsys, monkeypatch):
    """A progress bar drawn from the decoding thread leaves the line open (0.1 s after Ctrl-C once, the line came
    after the bar's, where nothing that reads lines finds it)."""
    import re

    from tqdm import tqdm

    from interrupting import LINE
    from mmspec import interrupt

    monkeypatch.setattr(interrupt, "_state", dict(interrupt._state))  # (this process's own is left as it was)
    with tqdm(total=10, desc="ImagePipeline") as bar:
        bar.update(1)
        assert interrupt.report() == interrupt.STATUS
        err = capsys.readouterr().err
    assert any(line.startswith(LINE) for line in re.split(r"[\r\n]", err)), err

"""A prompt naming none of the model's subjects: one line naming the words it did not know and where the subjects
are listed, through the pipeline, the command line (no Python warning with its source line) and the demo."""
import json
import os
import shutil

import pytest

from mmspec.cli import main
from mmspec.pipelines import ImagePipeline
from mmspec.pipelines.grid import prompt_notes
from mmspec.pipelines.subjects import PromptWarning, names_one

SUBJECTS = ["red heart", "apple"]


@pytest.fixture(scope="module")
def with_subjects(tiny_models, tmp_path_factory):
    """The tiny image model, its config listing subjects as emoji-image's does."""
    folder = tmp_path_factory.mktemp("subjects") / "image"
    shutil.copytree(tiny_models / "image", folder)
    config = json.loads((folder / "config.json").read_text())
    config["tokenizer"] = str(tiny_models / "vq")
    (folder / "config.json").write_text(json.dumps({**config, "subjects": SUBJECTS}))
    return folder


def test_a_subject_is_named_by_all_its_words():
    assert names_one("a red heart emoji", SUBJECTS) and names_one("apple", SUBJECTS)
    assert not names_one("heart", SUBJECTS) and not names_one("elephant", SUBJECTS)


def test_a_prompt_naming_no_subject_is_told_in_one_note(with_subjects):
    pipe = ImagePipeline.from_pretrained(with_subjects, window_cache="off")
    note, _ = pipe.prompt_note(["eiffel tower"])
    assert note == (f"the model draws 2 subjects and 'eiffel tower' names none of them: it does not know 'eiffel', "
                    f"'tower' (`mmspec models {with_subjects}` lists them)")
    assert "knows 'red heart', not 'heart' alone" in pipe.prompt_note(["heart"])[0]
    assert pipe.prompt_note(["a red heart"])[0] is None
    with pytest.warns(PromptWarning) as said:
        pipe("eiffel tower", method="ar")
    assert len(said) == 1  # the words are not named again as unknown ones


def test_the_command_line_says_it_in_one_line_and_lists_the_subjects(with_subjects, tmp_path, capsys):
    import subprocess
    import sys

    from interrupting import REPO

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "mmspec", "generate", "image", "elephant", "--model", str(with_subjects),
                          "--method", "ar", "--out", str(tmp_path)], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    err = [line for line in run.stderr.splitlines() if line.strip() and "%|" not in line]
    assert [line for line in err if "elephant" in line] == [
        f"mmspec: warning: ImagePipeline: the model draws 2 subjects and 'elephant' names none of them: it does not "
        f"know 'elephant' (`mmspec models {with_subjects}` lists them)"]
    assert all(line.startswith("mmspec: ") for line in err), err  # no Python warning format, no source line
    assert main(["models", str(with_subjects)]) == 0
    assert capsys.readouterr().out == f"{with_subjects}: 2 subjects: red heart, apple\n"


def test_the_bundled_image_model_lists_its_96_subjects(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "emoji-image: 96 subjects: red heart, smiling face," in out
    assert "emoji-video: the subjects of its first frames' model, emoji-image" in out and "emoji-vq" not in out


def test_a_video_tells_what_its_first_frames_model_does_not_draw(with_subjects, tiny_models, tmp_path):
    from mmspec.pipelines import VideoPipeline

    folder = tmp_path / "video"
    shutil.copytree(tiny_models / "video-from-text", folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(tokenizer=str(tiny_models / "vq"), first_frame_model=str(with_subjects))
    (folder / "config.json").write_text(json.dumps(config))
    video = VideoPipeline.from_pretrained(folder, window_cache="off")
    assert prompt_notes(video, "bounce heart") == [  # (words the video model knows, its first frame's does not draw)
        f"the model draws 2 subjects and 'heart' names none of them: it knows 'red heart', not 'heart' alone (`mmspec "
        f"models {with_subjects}` lists them)"]
    assert prompt_notes(video, "bounce heart", first_frame_given=True) == []

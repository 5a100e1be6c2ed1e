"""The subjects a model draws, where its config.json lists them (`subjects`: the bundled emoji-image's 96), and what
to say of a prompt that names none of them: such a prompt is drawn all the same, as some subject the model knows
("elephant", a word of its vocabulary but none of its subjects, gave french fries), so the user is told which words
it did not know and where the subjects are listed (`mmspec models`)."""
from __future__ import annotations

import json
from pathlib import Path

from mmspec.pipelines.prompts import listing, words

KEY = "subjects"  # the config.json key


class PromptWarning(UserWarning):
    """A prompt the model cannot take in whole (mmspec.pipelines.grid's prompt_note): the command line says it in one
    line, the demo shows it beside the output."""


def names_one(prompt: str, subjects: list[str]) -> bool:
    """Whether every word of some subject is in the prompt ("a red heart emoji" names "red heart")."""
    said = set(words(prompt))
    return any(set(words(subject)) <= said for subject in subjects)


def unnamed_note(prompt: str, subjects: list[str], model: "str | None") -> str:
    """What to tell of a prompt that names no subject: the words of it that are in no subject, and where the subjects
    are listed; where all its words are in some, the subjects that share them."""
    known = {w for subject in subjects for w in words(subject)}
    strange = [w for w in words(prompt) if w not in known]
    near = [s for s in subjects if set(words(s)) & set(words(prompt))]
    what = f"does not know {listing(strange)}" if strange else f"knows {listing(near, 4)}, not {prompt!r} alone"
    where = "mmspec models" if model is None else f"mmspec models {model}"
    return f"draws {len(subjects)} subjects and {prompt!r} names none of them: it {what} (`{where}` lists them)"


def describe(models: list[str]) -> list[str]:
    """`mmspec models`: a line per model (a bundled model's name or a folder; none: every bundled model), with its
    subjects where its config lists them."""
    from mmspec.pipelines.base import models_dir

    bundled = sorted(p.parent.name for p in models_dir().glob("*/config.json")
                     if "_class_name" not in json.loads(p.read_text()))  # (not the tokenizers: diffusers' configs)
    lines = []
    for model in models or bundled:
        folder = Path(model) if Path(model).is_dir() else models_dir() / model
        if not (folder / "config.json").is_file():
            raise ValueError(f"no model {model!r}: give a model folder or a bundled model ({', '.join(bundled)})")
        config = json.loads((folder / "config.json").read_text())
        if config.get(KEY):
            lines.append(f"{model}: {len(config[KEY])} subjects: {', '.join(config[KEY])}")
        elif "first_frame_model" in config:  # (a video drawn from a picture of its subject)
            lines.append(f"{model}: the subjects of its first frames' model, {Path(config['first_frame_model']).name}")
        else:
            lines.append(f"{model}: no list of subjects (any prompt)")
    return lines

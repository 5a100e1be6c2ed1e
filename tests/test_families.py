"""The family table: a model folder's family is read from its config.json before anything loads; what a family
cannot do, or a folder of no family, gets one line; every rule the table points at exists."""
import json

import pytest

from mmspec.cli import main
from mmspec.families import FAMILIES, family_of, rule


@pytest.mark.parametrize("model_type, said", [("bert", "not a family mmspec runs"),
                                              ("multi_modality", "mmspec convert janus"),
                                              ("mmspec-cosmos", "generates video, not image")])
def test_other_families_get_one_line_and_exit_2(tmp_path, capsys, model_type, said):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, "cosmos": {}}))
    assert main(["generate", "image", "a cat", "--model", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1


def test_a_llamagen_folder_without_its_vq_gets_one_line(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mmspec-gpt", "gpt": {}}))
    assert family_of(tmp_path).name == "llamagen"
    assert main(["generate", "image", "7", "--model", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "mmspec convert llamagen-vq vq_ds16_c2i.pt" in err and len(err.splitlines()) == 1


def test_every_rule_the_table_points_at_exists():
    for family in FAMILIES:
        for kind in family.kinds:
            assert family.pipeline(kind).kind == kind
        for text in (family.null_prompt, family.default_sampling, family.pixels, family.cfg_check or "none"):
            if ":" in text and not text.startswith("none"):
                assert rule(text) is not None, (family.name, text)

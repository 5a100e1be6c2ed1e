"""A model folder's family is read from its config.json before anything loads; other families get one line."""
import json

import pytest

from mmspec.cli import main
from mmspec.pipelines.families import family


@pytest.mark.parametrize("model_type, said", [("bert", "not a family mmspec runs"), ("janus", "JanusImage"),
                                              ("multi_modality", "mmspec convert janus"),
                                              ("mmspec-cosmos", "Cosmos video model")])
def test_other_families_get_one_line_and_exit_2(tmp_path, capsys, model_type, said):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    with pytest.raises(ValueError, match=said):
        family(tmp_path)
    assert main(["generate", "image", "a cat", "--model", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1

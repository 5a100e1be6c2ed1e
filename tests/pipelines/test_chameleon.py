"""A Chameleon folder (Lumina-mGPT, Anole) through ImagePipeline and the CLI: recognised from its config, prompt ->
tokens -> pixels; a folder without its VQGAN or tokenizer is refused in one line before anything loads."""
import shutil

import numpy as np
import pytest
import torch

from mmspec.adapters.chameleon import DEFAULT_SAMPLING
from mmspec.cli import main
from mmspec.pipelines import ImagePipeline, VideoPipeline
from mmspec.pipelines.chameleon import ChameleonPipeline
from tiny import tiny_chameleon_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("chameleon") / "model"
    tiny_chameleon_folder(path)
    return path


def test_image_pipeline_recognises_the_family_and_decodes(folder):
    pipe = ImagePipeline.from_pretrained(folder, window_cache="off")
    assert isinstance(pipe, ChameleonPipeline) and pipe.default_sampling == DEFAULT_SAMPLING
    assert (pipe.layout.h, pipe.layout.w) == (2, 2)
    ar = pipe(["a red cat", "a dog"], num_outputs=2, method="ar", seed=4)
    exact = pipe(["a red cat", "a dog"], num_outputs=2, method="exact", window=4, seed=4)
    assert torch.equal(ar.tokens, exact.tokens) and ar.tokens.shape == (4, 2 * 3 + 1)
    assert [im.size for im in ar.images] == [(32, 32)] * 4
    codes = pipe.target.codes_of(ar.tokens, pipe.layout)
    expected = ((pipe.tokenizer.decode(codes).permute(0, 2, 3, 1) + 1) * 127.5).round().byte()
    assert torch.equal(torch.from_numpy(np.array(ar.images[1])), expected[1])
    with pytest.raises(ValueError, match="generates images"):
        VideoPipeline.from_pretrained(folder, window_cache="off")


def test_cli_generates_from_the_folder(folder, tmp_path, capsys):
    assert main(["generate", "image", "a red cat", "--model", str(folder), "--out", str(tmp_path), "--method", "exact",
                 "--window", "4", "--json"]) == 0
    assert (tmp_path / "image_000.png").is_file()


@pytest.mark.parametrize("missing, said", [("vqgan", "mmspec convert chameleon-vq"), ("tokenizer.json", "tokenizer.json")])
def test_a_folder_without_its_vqgan_or_tokenizer_gets_one_line(folder, tmp_path, capsys, missing, said):
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    shutil.rmtree(copy / missing) if (copy / missing).is_dir() else (copy / missing).unlink()
    assert main(["generate", "image", "a cat", "--model", str(copy), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1

"""A Chameleon folder (Lumina-mGPT, Anole) through ImagePipeline and the CLI: recognised from its config, prompt ->
tokens -> pixels; a folder without its VQGAN or tokenizer is refused in one line before anything loads; a folder as
Lumina-mGPT's own class saves it gives, through `generate image --model` and `bench --model`, the PNG of Lumina-mGPT's
greedy tokens cast as its own code casts them."""
import io
import json
import shutil

import numpy as np
import pytest
import torch

from PIL import Image

from lumina import lumina_folder, lumina_generate
from mmspec.adapters.chameleon import DEFAULT_SAMPLING, instruction
from mmspec.cli import main
from mmspec.pipelines import ImagePipeline, VideoPipeline
from mmspec.pipelines.chameleon import ChameleonPipeline
from mmspec.tokenizers.vq import VQTokenizer
from tiny import C_BOI, C_BOS, C_IMAGE0, C_RES1, tiny_chameleon_folder

BUILD = tiny_chameleon_folder  # the tiny folder of conftest.py's `folder`


def test_image_pipeline_recognises_the_family_and_decodes(folder):
    pipe = ImagePipeline.from_pretrained(folder, window_cache="off")
    assert isinstance(pipe, ChameleonPipeline) and pipe.default_sampling == DEFAULT_SAMPLING
    assert (pipe.layout.h, pipe.layout.w) == (2, 2)
    ar = pipe(["a red cat", "a dog"], num_outputs=2, method="ar", seed=4)
    exact = pipe(["a red cat", "a dog"], num_outputs=2, method="exact", window=4, seed=4)
    assert torch.equal(ar.tokens, exact.tokens) and ar.tokens.shape == (4, 2 * 3 + 1)
    assert [im.size for im in ar.images] == [(32, 32)] * 4
    codes = pipe.target.codes_of(ar.tokens, pipe.layout)
    assert np.array_equal(np.array(ar.images[1]), lumina_cast(pipe.tokenizer.decode(codes[1:2]))[0])
    with pytest.raises(ValueError, match="generates image, not video"):
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


def lumina_cast(x: torch.Tensor) -> np.ndarray:
    """Lumina-mGPT's cast of decoded pixels [B, 3, H, W] (its chameleon_vae_ori image_tokenizer, restated): clamp,
    (x + 1) / 2 in torch, then * 255 and astype(uint8) in numpy -> [B, H, W, 3]."""
    hwc = ((torch.clamp(x, -1.0, 1.0) + 1.0) / 2.0).permute(0, 2, 3, 1).numpy()
    return (hwc * 255).astype(np.uint8)


def png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module", params=[1, 2], ids=["mp1", "mp2"])  # the 7B release's model_parallel_size, and 2
def lumina(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"lumina_mp{request.param}") / "model"
    return path, lumina_folder(path, shards=request.param)


GREEDY_FLAGS = ["--temperature", "0", "--top-k", "4", "--cfg-scale", "3.0"]


def test_a_folder_lumina_mgpt_saved_generates_its_greedy_image(lumina, tmp_path, capsys):
    """`generate image --model` on the folder: the PNG holds Lumina-mGPT's greedy tokens (its processors over its
    per-shard norms) decoded by the folder's VQGAN and cast by Lumina-mGPT's rule, byte for byte."""
    path, model = lumina
    from transformers import PreTrainedTokenizerFast

    text = PreTrainedTokenizerFast.from_pretrained(path)
    ids = [C_BOS] + text(instruction("a red cat", 2, 2), add_special_tokens=False).input_ids + [C_BOI, C_RES1, C_RES1]
    tokens = lumina_generate(model, ids, range(C_IMAGE0, C_IMAGE0 + 6), 2, 2, 3.0, 4)  # [1, 7]; 6 codes
    codes = tokens[:, :-1].view(1, 2, 3)[..., :2] - C_IMAGE0  # row ends and EOI dropped
    pixels = VQTokenizer.from_pretrained(path / "vqgan").decode(codes)  # [1, 3, 32, 32] in [-1, 1]
    expected = lumina_cast(pixels)[0]
    assert not np.array_equal(expected, ((pixels[0].permute(1, 2, 0) + 1) * 127.5).round().byte().numpy())  # (rounding
    # would fail it)
    for method in ("ar", "exact"):
        out = tmp_path / method
        assert main(["generate", "image", "a red cat", "--model", str(path), "--out", str(out), "--method", method,
                     "--window", "4", "--json", *GREEDY_FLAGS]) == 0
        assert (out / "image_000.png").read_bytes() == png(expected)


def test_a_folder_lumina_mgpt_saved_runs_the_fields_table(lumina, tmp_path, capsys):
    path, _ = lumina
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red cat\na dog\n")
    assert main(["bench", "--model", str(path), "--prompts", str(prompts), "--methods", "coupled,exact",
                 "--window", "4", "--out", str(tmp_path / "table"), *GREEDY_FLAGS]) == 0
    rows = json.loads((tmp_path / "table" / "table.json").read_text())["rows"]
    assert {r["name"] for r in rows} >= {"coupled", "exact"}
    assert all(r["identical_inputs"] == r["inputs"] == 2 for r in rows if r["name"] == "exact")


@pytest.mark.parametrize("shape, said", [((3, 8), "[3, 8]"), ((2, 8), "model_parallel_size 1")])
def test_a_norm_of_another_shape_is_refused_in_one_line(folder, tmp_path, capsys, shape, said):
    """A q_norm neither per head nor per shard (config.json's model_parallel_size 1): one line naming the tensor."""
    from safetensors.torch import load_file, save_file

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    sd = load_file(str(copy / "model.safetensors"))
    sd["model.layers.1.self_attn.q_norm.weight"] = torch.ones(shape)
    save_file(sd, str(copy / "model.safetensors"), metadata={"format": "pt"})
    assert main(["generate", "image", "a cat", "--model", str(copy), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "model.layers.1.self_attn.q_norm.weight" in err and said in err and len(err.splitlines()) == 1

"""A Janus folder's image size, deepseek's `img_size`, through every door that loads it: `from_pretrained(img_size=)`,
`--img-size` of generate, bench and demo, a render job's `img_size:`; greedy tokens equal deepseek's generate at that
size; a size the model cannot make, or a family that takes none, refused in one line before the weights load."""
import json

import pytest
import torch
import yaml

from mmspec.adapters.janus import JanusImage
from mmspec.cli import main
from mmspec.pipelines import ImagePipeline
from mmspec.render import render_job
from mmspec.render.job import JobError
from tiny import deepseek_greedy, tiny_janus_folder, tiny_llamagen_folder

BUILD = tiny_janus_folder  # the tiny folder of conftest.py's `folder`

SIZE = 6  # pixels: 3 x 3 tokens of the tiny model's 2 pixels (its own grid: 2 x 2)
GREEDY = ["--temperature", "0", "--method", "exact", "--window", "4"]


@pytest.fixture(scope="module")
def pipe(folder):
    return ImagePipeline.from_pretrained(folder, window_cache="off", img_size=SIZE)


def test_img_size_is_deepseeks_and_greedy_equals_its_generate(pipe):
    assert (pipe.layout.h, pipe.layout.w) == (3, 3)
    out = pipe(["a red cat", "a dog"], sampling={"temperature": 0}, method="exact", window=4)
    own = torch.cat([deepseek_greedy(pipe.target.model, ids, pipe.default_sampling["cfg_scale"], 3)
                     for ids in pipe.condition(["a red cat", "a dog"])])
    assert torch.equal(out.tokens, own) and [im.size for im in out.images] == [(SIZE, SIZE)] * 2


def test_generate_bench_and_render_doors_take_the_size(pipe, folder, tmp_path, capsys):
    expected = pipe("a dog", sampling={"temperature": 0}, method="exact", window=4).save(tmp_path / "pipe")[0]
    argv = ["generate", "image", "a dog", "--model", str(folder), "--img-size", str(SIZE),
            "--out", str(tmp_path / "cli"), *GREEDY, "--json"]
    assert main(argv) == 0
    assert (tmp_path / "cli" / "image_000.png").read_bytes() == expected.read_bytes()
    job = {"kind": "image", "model": str(folder), "img_size": SIZE,
           "defaults": {"method": "exact", "window": 4, "seeds": [0], "sampling": {"temperature": 0}},
           "items": [{"prompt": "a dog"}]}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    assert render_job(tmp_path / "job.yaml", tmp_path / "render")["rendered"] == 1
    manifest = json.loads((tmp_path / "render" / "manifest.jsonl").read_text().splitlines()[0])
    assert (tmp_path / "render" / manifest["file"]).read_bytes() == expected.read_bytes()
    (tmp_path / "prompts.txt").write_text("a dog\na red cat")
    table = ["bench", "--model", str(folder), "--img-size", str(SIZE), "--prompts", str(tmp_path / "prompts.txt"),
             "--methods", "exact", "--window", "4", "--out", str(tmp_path / "table"), "--json"]
    assert main(table) == 0
    rows = json.loads((tmp_path / "table" / "table.json").read_text())["rows"]
    assert [r["identical_inputs"] for r in rows if r["name"] == "exact"] == [2]
    capsys.readouterr()
    bench = ["bench", "--model", str(folder), "--img-size", str(SIZE), "--methods", "exact", "--prompt", "a dog",
             "--window", "4", "--json"]
    assert main(bench) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["kind"] == "image"


def test_the_demo_door_takes_the_size(folder, monkeypatch):
    import mmspec.demo
    from mmspec.pipelines import load_pipeline

    built = {}
    monkeypatch.setattr(mmspec.demo, "build_app", lambda *models, **options: built.setdefault("models", models))
    monkeypatch.setattr(mmspec.demo, "launch", lambda *args: None)
    assert main(["demo", "--model", str(folder), "--img-size", str(SIZE)]) == 0
    assert built["models"][0] == str(folder) and built["models"][-1] == SIZE
    monkeypatch.undo()
    loaded = []

    def first_tab(*args, **kwargs):  # the image tab's pipeline, then stop: the tab's views need no test here
        loaded.append(load_pipeline(*args, **kwargs))
        raise StopIteration

    monkeypatch.setattr(mmspec.demo.app, "load_pipeline", first_tab)
    with pytest.raises(StopIteration):
        mmspec.demo.build_app(folder, img_size=SIZE)
    assert (loaded[0].layout.h, loaded[0].layout.w) == (3, 3)


@pytest.mark.parametrize("size", [5, 0, 46])
def test_a_size_the_model_cannot_make_is_one_line_naming_those_it_can(folder, tmp_path, capsys, monkeypatch, size):
    monkeypatch.setattr(JanusImage, "from_pretrained", None)  # the weights never load
    argv = ["generate", "image", "a dog", "--model", str(folder), "--img-size", str(size), "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert (f"img_size {size}: this Janus model makes square images of n x n tokens of 2 pixels, n from 1 "
                        "to 22 (a prompt of 6+ tokens, then n * n, within its 512 positions): img_size 2, 4, ..., 44, "
                        "image_token_num_per_image 1, 4, ..., 484") in err


def test_a_prompt_too_long_for_the_size_is_refused_before_any_work_naming_the_size_that_fits(folder):
    """22 x 22 tokens after the generation prompt of an empty text (6 tokens) fit in the tiny model's 512 positions;
    after a prompt of 32 tokens only 21 x 21 do."""
    pipe = ImagePipeline.from_pretrained(folder, window_cache="off", img_size=44)
    long = "a dog " * 13
    assert len(pipe.condition([long])[0]) == 32
    with pytest.raises(ValueError, match=r"^a prompt of 32 tokens and an image of 484 tokens take 516 positions, more "
                                         r"than this Janus model's 512: a shorter prompt, or img_size at most 42 "
                                         r"\(image_token_num_per_image 441\) after it$"):
        pipe.check_call([long], 1, None)


def test_a_family_that_takes_no_size_refuses_it_in_one_line(tmp_path, capsys):
    other = tiny_llamagen_folder(tmp_path / "llamagen")
    argv = ["generate", "image", "3", "--model", str(other), "--img-size", "32", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "LlamaGen model: it takes no img_size (a Janus image's side in pixels, deepseek's img_size)" in err
    assert len(err.splitlines()) == 1
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"kind": "image", "model": str(other), "img_size": 32,
                                                       "items": [{"prompt": "3"}]}))
    with pytest.raises(JobError, match="model: .* it takes no img_size"):
        render_job(tmp_path / "job.yaml", tmp_path / "render")

"""Every family through every door (docs/usage.md's table names these tests): a tiny random folder in each family's
released layout, built here, through `ImagePipeline.from_pretrained`, `mmspec generate image --model`, a render
job's `model:` and `mmspec bench --model` (the demo's tab: tests/demo/test_families.py). Greedy tokens through the
pipeline equal the family's own generate; every other door gives the pipeline's tokens or its very PNG bytes. Where a
door makes no sense for a family, its one line, before any work."""
import functools
import json

import pytest
import torch
import yaml

from mmspec.cli import main
from mmspec.pipelines import ImagePipeline
from mmspec.render import render_job
from lumina import generating, lumina_generate
from tiny import (emu3_allowed_tokens, tiny_chameleon_folder, tiny_cosmos_folder, tiny_emu3_folder, tiny_janus_folder,
                  tiny_llamagen_folder)

FOLDERS = {"chameleon": tiny_chameleon_folder, "janus": tiny_janus_folder, "emu3": tiny_emu3_folder,
           "llamagen": tiny_llamagen_folder}
TEXT = ["a red cat", "a dog"]


def prompts(name: str) -> list[str]:
    return ["1", "3"] if name == "llamagen" else TEXT  # (LlamaGen's class-to-image: class labels)
GREEDY = {"temperature": 0}  # merged over the family's defaults: its CFG stays
CALL = dict(method="exact", window=4, seed=0)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("families")
    for name, build in FOLDERS.items():
        build(root / name)
    return root


@functools.lru_cache(maxsize=None)
def pipeline(folder) -> ImagePipeline:
    return ImagePipeline.from_pretrained(folder, window_cache="off")


def own_greedy(name: str, pipe, prompt: str) -> torch.Tensor:
    """The family's own greedy image for a prompt [1, N], at its default CFG: transformers' generate as the family
    runs it (Janus: its image mode; Emu3: constrained decoding with the negative prompt; Lumina-mGPT: its logits
    processors restated) on the ids the pipeline builds."""
    model, cfg = pipe.target.model, pipe.default_sampling["cfg_scale"]
    if name == "llamagen":
        return llamagen_greedy(model, pipe.condition([prompt]), pipe.layout, cfg)
    if name == "chameleon":
        ids = pipe.target.prompt_ids([prompt], pipe.layout)[0].tolist()
        return lumina_generate(generating(model), ids, model.model.vocabulary_mapping.image_tokens, pipe.layout.h,
                               pipe.layout.w, cfg, pipe.default_sampling["top_k"])
    if name == "janus":
        ids = torch.tensor(pipe.condition([prompt]))
        return model.generate(ids, attention_mask=torch.ones_like(ids), generation_mode="image", do_sample=False,
                              guidance_scale=cfg)
    condition = pipe.condition([prompt])
    ids, negative = torch.tensor(condition["prompt"]), torch.tensor(condition["negative_prompt"])
    h, w = pipe.layout.h, pipe.layout.w
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=(w + 1) * h + 3, do_sample=False,
                         prefix_allowed_tokens_fn=emu3_allowed_tokens(model, h, w), guidance_scale=cfg,
                         negative_prompt_ids=negative, negative_prompt_attention_mask=torch.ones_like(negative))
    return out[:, ids.shape[1]:]


@torch.no_grad()
def llamagen_greedy(model, labels: torch.Tensor, layout, scale: float) -> torch.Tensor:
    """LlamaGen's generate at greedy, restated: one token at a time, the raw logits of the class and of the null class
    mixed, u + s (c - u), then argmax. [B, N]"""
    tokens, positions = torch.zeros(len(labels), layout.length, dtype=torch.long), layout.positions()
    for i in range(layout.length):
        c = model.forward_sequence(labels, tokens, positions)[:, i]
        u = model.forward_sequence(model.null_condition(len(labels)), tokens, positions)[:, i]
        tokens[:, i] = (u + scale * (c - u)).argmax(-1)
    return tokens


def pipeline_pngs(folder, tmp_path, prompt: str) -> list[bytes]:
    out = pipeline(folder)(prompt, sampling=GREEDY, **CALL)
    return [p.read_bytes() for p in out.save(tmp_path / "pipeline")]


@pytest.mark.parametrize("name", FOLDERS)
def test_pipeline_door_greedy_equals_the_familys_own_generate(folders, name):
    pipe = pipeline(folders / name)
    assert type(pipe).__name__.lower().startswith(name) and pipe.family.name == name
    out = pipe(prompts(name), sampling=GREEDY, **CALL)
    own = torch.cat([own_greedy(name, pipe, p) for p in prompts(name)])
    assert torch.equal(out.tokens, own)
    assert torch.equal(pipe(prompts(name), sampling=GREEDY, method="ar").tokens, own)
    assert len(out.images) == 2 and out.images[0].size[0] > 1


@pytest.mark.parametrize("name", FOLDERS)
def test_generate_door_writes_the_pipelines_png(folders, name, tmp_path, capsys):
    argv = ["generate", "image", prompts(name)[0], "--model", str(folders / name), "--out", str(tmp_path / "cli"),
            "--temperature", "0", "--method", "exact", "--window", "4", "--json"]
    assert main(argv) == 0
    assert (tmp_path / "cli" / "image_000.png").read_bytes() == pipeline_pngs(folders / name, tmp_path, prompts(name)[0])[0]


@pytest.mark.parametrize("name", FOLDERS)
def test_render_door_writes_the_pipelines_png(folders, name, tmp_path):
    job = {"kind": "image", "model": str(folders / name), "batch_size": 2,
           "defaults": {"method": "exact", "window": 4, "seeds": [0], "sampling": GREEDY}, "items": [{"prompt": p} for p in prompts(name)]}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    summary = render_job(tmp_path / "job.yaml", tmp_path / "render")
    assert summary["failed"] == 0 and summary["rendered"] == 2
    manifest = [json.loads(line) for line in (tmp_path / "render" / "manifest.jsonl").read_text().splitlines()]
    rendered = {m["prompt"]: (tmp_path / "render" / m["file"]).read_bytes() for m in manifest}
    assert rendered[prompts(name)[1]] == pipeline_pngs(folders / name, tmp_path, prompts(name)[1])[0]


@pytest.mark.parametrize("name", FOLDERS)
def test_bench_doors_run_the_family(folders, name, tmp_path, capsys):
    (tmp_path / "prompts.txt").write_text("\n".join(prompts(name)))
    table = ["bench", "--model", str(folders / name), "--prompts", str(tmp_path / "prompts.txt"), "--methods",
             "exact", "--window", "4", "--out", str(tmp_path / "table"), "--json"]
    assert main(table) == 0  # (exit 1 if exact's tokens were not AR's)
    result = json.loads((tmp_path / "table" / "table.json").read_text())
    assert [r["identical_inputs"] for r in result["rows"] if r["name"] == "exact"] == [2]
    bench = ["bench", "--model", str(folders / name), "--methods", "exact", "--prompt", prompts(name)[0], "--window", "4",
             "--json"]
    assert main(bench) == 0  # (the lossless check passed)
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["kind"] == "image"


@pytest.fixture(scope="module")
def cosmos(tmp_path_factory):
    return tiny_cosmos_folder(tmp_path_factory.mktemp("cosmos") / "model")


@pytest.mark.parametrize("door, said", [
    (["demo", "--model"], "mmspec demo --model does not run it"),
    (["bench", "--prompts", "PROMPTS", "--model"], "benchmarked over clips: mmspec bench video --model FOLDER --videos"),
    (["generate", "video", "--image", "PROMPTS", "--model"], "no image (it takes video)")])
def test_cosmos_refuses_the_doors_that_make_no_sense_in_one_line(cosmos, tmp_path, capsys, door, said):
    (tmp_path / "prompts.txt").write_text("a cat")
    argv = [str(tmp_path / "prompts.txt") if a == "PROMPTS" else a for a in door] + [str(cosmos)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1


def test_a_render_job_on_cosmos_is_refused_in_one_line(cosmos, tmp_path):
    (tmp_path / "job.yaml").write_text(yaml.safe_dump({"kind": "video", "model": str(cosmos),
                                                       "items": [{"prompt": "a cat"}]}))
    with pytest.raises(ValueError, match="a render job's model: does not run it") as err:
        render_job(tmp_path / "job.yaml", tmp_path / "out")
    assert len(str(err.value).splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["chameleon", "janus", "emu3", "llamagen"])
def test_pictures_a_family_does_not_take_are_refused_before_any_work(folders, name, tmp_path, capsys):
    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "picture.png")
    argv = ["generate", "image", "a cat", "--model", str(folders / name), "--image", str(tmp_path / "picture.png"),
            "--mask", str(tmp_path / "picture.png"), "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    assert "no image or mask (it generates from the prompt alone)" in capsys.readouterr().err
    job = {"kind": "image", "model": str(folders / name),
           "items": [{"prompt": "a cat", "image": "picture.png", "mask": "picture.png"}]}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    with pytest.raises(ValueError, match="generates from its prompts alone"):
        render_job(tmp_path / "job.yaml", tmp_path / "render")


def test_sampling_merges_with_the_familys_defaults_and_none_turns_one_off(folders):
    """A call's sampling replaces the default keys it names; the family's CFG stays unless turned off with None."""
    pipe = pipeline(folders / "janus")
    assert pipe.default_sampling["cfg_scale"] == 5.0
    merged = pipe(TEXT[0], sampling={"temperature": 0}, method="ar")
    named = pipe(TEXT[0], sampling={"temperature": 0, "cfg_scale": 5.0}, method="ar")
    off = pipe(TEXT[0], sampling={"temperature": 0, "cfg_scale": None}, method="ar")
    plain = pipe(TEXT[0], sampling={"temperature": 0, "cfg_scale": 1.0}, method="ar")
    assert torch.equal(merged.tokens, named.tokens) and torch.equal(off.tokens, plain.tokens)
    assert not torch.equal(merged.tokens, off.tokens)
    lumina = pipeline(folders / "chameleon")  # the case of the issue: top_k given, Lumina-mGPT's CFG 3.0 kept
    given = lumina(TEXT[0], sampling={"temperature": 0, "top_k": 1}, method="ar")
    whole = lumina(TEXT[0], sampling={**lumina.default_sampling, "temperature": 0, "top_k": 1}, method="ar")
    assert lumina.default_sampling["cfg_scale"] == 3.0 and torch.equal(given.tokens, whole.tokens)


def test_the_reference_image_folder_through_the_table_door(tiny_models, tmp_path, capsys):
    (tmp_path / "prompts.txt").write_text("red heart\nbounce apple")
    argv = ["bench", "--model", str(tiny_models / "image"), "--prompts", str(tmp_path / "prompts.txt"), "--methods",
            "exact", "--window", "4", "--out", str(tmp_path / "table"), "--json"]
    assert main(argv) == 0
    result = json.loads((tmp_path / "table" / "table.json").read_text())
    assert [r["identical_inputs"] for r in result["rows"] if r["name"] == "exact"] == [2]
    assert main([*argv[:2], str(tiny_models / "video"), *argv[3:]]) == 2
    assert "--prompts runs image models; video takes mmspec bench video --model FOLDER" in capsys.readouterr().err


def test_demo_model_opens_the_folder_in_its_kinds_tab(folders, tiny_models, monkeypatch, capsys):
    import mmspec.demo

    built = {}
    monkeypatch.setattr(mmspec.demo, "build_app", lambda *models, **options: built.setdefault("models", models))
    monkeypatch.setattr(mmspec.demo, "launch", lambda *args: None)
    assert main(["demo", "--model", str(folders / "janus")]) == 0
    assert built["models"][:3] == (str(folders / "janus"), None, None)
    built.clear()
    assert main(["demo", "--model", str(tiny_models / "video")]) == 0
    assert built["models"][:3] == (None, str(tiny_models / "video"), None)
    assert main(["demo", "--model", str(tiny_models / "video"), "--video-model", str(tiny_models / "video")]) == 2
    assert "give one" in capsys.readouterr().err


def test_a_text_folder_through_bench_and_refused_by_the_table_door(tiny_text, tmp_path, capsys):
    folder = str(tiny_text / "target")
    assert main(["bench", "--model", folder, "--methods", "exact", "--prompt", "<s> w3", "--max-new-tokens", "8",
                 "--window", "4", "--json"]) == 0  # (its kind from the folder: text; the lossless check passed)
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["kind"] == "text"
    (tmp_path / "prompts.txt").write_text("<s> w3")
    assert main(["bench", "--model", folder, "--prompts", str(tmp_path / "prompts.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert "mmspec bench --model --prompts does not run it (the field's table is of image models" in err
    assert len(err.splitlines()) == 1


def test_a_llamagen_text_to_image_folder_takes_t5_feature_files(tmp_path, capsys):
    from safetensors.torch import save_file

    folder = tiny_llamagen_folder(tmp_path / "t2i", "t2i")
    save_file({"context": torch.randn(3, 12, generator=torch.Generator().manual_seed(0))}, str(tmp_path / "f.safetensors"))
    pipe = ImagePipeline.from_pretrained(folder, window_cache="off")
    out = pipe(str(tmp_path / "f.safetensors"), sampling=GREEDY, **CALL)
    own = llamagen_greedy(pipe.target.model, pipe.condition([str(tmp_path / "f.safetensors")]), pipe.layout, 7.5)
    assert torch.equal(out.tokens, own)
    assert main(["generate", "image", "a cat", "--model", str(folder), "--out", str(tmp_path / "out")]) == 2
    assert "no text features at a cat: give a .safetensors file holding 'context'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["janus", "emu3"])
def test_a_janus_or_emu3_batch_that_does_not_fit_is_refused_before_any_work(folders, name, tmp_path, monkeypatch,
                                                                            capsys):
    """Their targets give their sizes (memory_shape): a call's rows are estimated before any work, through the
    pipeline and `mmspec generate`, and a batch_size that does not fit is refused in one line naming what fits."""
    from mmspec import memory
    from mmspec.api import row_need

    pipe = pipeline(folders / name)
    need = row_need(pipe.target, pipe.condition(TEXT[:1]), pipe.layout, method="exact", window=4,
                    sampling=pipe.default_sampling)
    assert need is not None
    monkeypatch.setattr(memory, "free_bytes", lambda device: int((memory.fixed_bytes() + 2 * need) / memory.SHARE) + 1)
    monkeypatch.setattr(type(pipe.target), "session", None)  # any work would fail
    with pytest.raises(memory.DoesNotFit, match=r"^3 rows at a time need about .* holds 2 rows: pass batch_size=2"):
        pipe(TEXT[0], num_outputs=3, batch_size=3, **CALL)
    argv = ["generate", "image", TEXT[0], "--model", str(folders / name), "--num-outputs", "3", "--batch-size", "3",
            "--method", "exact", "--window", "4", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "3 rows at a time need about" in err and len(err.splitlines()) == 1 and not (tmp_path / "out").exists()

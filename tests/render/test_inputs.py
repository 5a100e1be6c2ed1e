"""Jobs that give their pipeline files: image (a video's first frame, the picture to inpaint) and mask."""
import hashlib
import tempfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mmspec.cli import main
from mmspec.pipelines import ImagePipeline, VideoPipeline
from mmspec.render import JobError, load_job, render_job
from mmspec.render.naming import output_id
from mmspec.pipelines import load_pipeline
from mmspec.render.worker import render_batch


@pytest.fixture
def files(tmp_path):
    """Pictures beside the job file: two first frames / pictures, a copy of one, masks for the 8x8 tiny image."""
    rng = np.random.default_rng(0)
    (tmp_path / "sub").mkdir()
    for name, colour in (("a.png", (230, 40, 40)), ("b.png", (30, 60, 230))):
        noise = rng.integers(-25, 25, (8, 8, 3))
        Image.fromarray(np.clip(np.array(colour) + noise, 0, 255).astype(np.uint8)).save(tmp_path / name)
    (tmp_path / "sub" / "a-copy.png").write_bytes((tmp_path / "a.png").read_bytes())
    top = np.zeros((8, 8), np.uint8)
    top[:2] = 255  # the first row of tokens (2 pixels per token)
    Image.fromarray(top).save(tmp_path / "mask.png")
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "keep-all.png")
    Image.fromarray(np.zeros((5, 5), np.uint8)).save(tmp_path / "odd-mask.png")
    (tmp_path / "notes.txt").write_text("not a picture")
    return tmp_path


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_outputs_are_named_by_the_bytes_of_their_files(models, files, write_job):
    items = [{"prompt": "x"}, {"prompt": "x", "image": "b.png"}, {"prompt": "y", "image": None, "mask": None}]
    job = {"kind": "image", "model": str(models / "image"),
           "defaults": {"image": "a.png", "mask": "mask.png", "method": "exact", "window": 4}, "items": items}
    outputs = load_job(write_job(job)).outputs
    assert outputs[0].inputs == {"image": {"path": str(files / "a.png"), "sha256": sha(files / "a.png")},
                                 "mask": {"path": str(files / "mask.png"), "sha256": sha(files / "mask.png")}}
    assert outputs[1].inputs["image"]["sha256"] == sha(files / "b.png") and outputs[2].inputs == {}
    assert len({o.group for o in outputs}) == 3  # one engine call takes one image and mask
    plain = outputs[2]  # no files: the id of a job written before jobs took files, so old folders resume
    assert plain.id == output_id({"kind": "image", "model": job["model"], "prompt": "y", "settings": plain.settings,
                                  "seed": 0})
    copy = {**job, "items": [{"prompt": "x", "image": "sub/a-copy.png"}]}
    assert load_job(write_job(copy)).outputs[0].id == outputs[0].id  # a.png's copy: the same bytes, the same output
    with pytest.raises(JobError, match=r"items\[0\] asks for this output already"):  # so both in a job: refused
        load_job(write_job({**job, "items": [*items, *copy["items"]]}))
    Image.new("RGB", (8, 8), (0, 200, 0)).save(files / "a.png")  # another picture at the same path
    again = load_job(write_job(job)).outputs
    assert again[0].id not in {o.id for o in outputs}  # a.png's outputs are new; the copy keeps the old id
    assert [o.id for o in again[1:]] == [outputs[1].id, outputs[2].id]
    assert load_job(write_job(copy)).outputs[0].id == outputs[0].id


BAD = [
    ("image", {"prompt": "x", "image": "none.png", "mask": "mask.png"}, {}, "items[0].image: no file 'none.png'"),
    ("image", {"prompt": "x", "mask": "mask.png"}, {}, "items[0].mask: inpainting needs both image"),
    ("image", {"prompt": "x"}, {"image": "a.png"}, "items[0].image: inpainting needs both image (the picture) and "
                                                   "mask (nonzero where to regenerate); mask is missing"),
    ("image", {"prompt": "x", "image": "notes.txt", "mask": "mask.png"}, {}, "items[0].image: 'notes.txt' is not an "
                                                                             "image file"),
    ("image", {"prompt": "x", "image": "a.png", "mask": "odd-mask.png"}, {},
     "items[0].mask: mask must be [H, W] with H, W multiples of the token grid 4 x 4, got (5, 5)"),
    ("image", {"prompt": "x", "image": 3, "mask": "mask.png"}, {}, "items[0].image: must be a path to an image file"),
    ("image", {"prompt": "x"}, {"image": "gone.png", "mask": "mask.png"}, "defaults.image: no file 'gone.png'"),
    ("video", {"prompt": "x", "image": "a.png", "mask": "mask.png"}, {}, "items[0].mask: a video job takes no mask"),
    ("text", {"prompt": "x", "image": "a.png"}, {}, "items[0].image: a text job takes no image; image is for video "
                                                    "jobs (the first frame) and image jobs"),
]


@pytest.mark.parametrize("kind, item, defaults, message", BAD)
def test_bad_files_are_refused_before_any_work(models, tiny_text, files, write_job, kind, item, defaults, message):
    model = str(tiny_text / "target") if kind == "text" else str(models / kind)
    job = write_job({"kind": kind, "model": model, "defaults": defaults, "items": [item]})
    with pytest.raises(JobError) as err:
        load_job(job)
    assert message in str(err.value) and str(err.value).startswith("job.yaml")
    assert main(["render", str(job), "--out", str(files / "out")]) == 2 and not (files / "out").exists()


def test_a_video_job_renders_from_its_first_frames(tiny_models, files, write_job, folder, tmp_path):
    models = tiny_models  # their VQ encodes a.png and b.png to different tokens (the spread codebook does not)
    job = write_job({"kind": "video", "model": str(models / "video"),
                     "defaults": {"method": "coupled", "window": 4, "seeds": [0, 1], "image": "a.png"},
                     "items": [{"prompt": "bounce apple"}, {"prompt": "bounce apple", "image": "b.png"},
                               {"prompt": "red heart", "image": None}]})
    one, eight = tmp_path / "one", tmp_path / "eight"
    assert render_job(job, eight, progress=False)["rendered"] == 6
    render_job(job, one, batch_size=1, progress=False)
    assert folder(one).files == folder(eight).files and folder(eight).verified()
    lines = {(line["prompt"], line["seed"], line.get("image")): line for line in folder(eight).manifest}
    first = lines[("bounce apple", 1, str(files / "a.png"))]
    assert first["image_sha256"] == sha(files / "a.png") and "image" not in lines[("red heart", 0, None)]
    pipe = VideoPipeline.from_pretrained(models / "video")  # the same call by hand: the same bytes
    by_hand = pipe("bounce apple", seed=1, method="coupled", window=4, image=files / "a.png")
    with tempfile.TemporaryDirectory() as scratch:
        assert by_hand.save(scratch, formats=("gif",))[0].read_bytes() == folder(eight).files[first["file"]]
    other = lines[("bounce apple", 1, str(files / "b.png"))]
    assert folder(eight).files[other["file"]] != folder(eight).files[first["file"]]


def test_an_image_job_inpaints(models, files, write_job, folder, tmp_path):
    job = write_job({"kind": "image", "model": str(models / "image"),
                     "defaults": {"method": "exact", "window": 4, "num": 3, "image": "a.png", "mask": "mask.png"},
                     "items": [{"prompt": "red heart"}, {"prompt": "red heart", "mask": "keep-all.png"}]})
    out = tmp_path / "out"
    assert render_job(job, out, progress=False)["rendered"] == 6
    lines = folder(out).manifest
    kept = {folder(out).files[line["file"]] for line in lines if line["mask"].endswith("keep-all.png")}
    pipe = ImagePipeline.from_pretrained(models / "image")
    source = pipe.tokenizer.decode_pil(pipe._image_frame(files / "a.png").view(1, 4, 4))[0]
    all_kept, = [line for line in lines if line["mask"].endswith("keep-all.png") and line["seed"] == 2]
    assert len(kept) == 1 and np.array_equal(np.asarray(Image.open(out / all_kept["file"])), np.asarray(source))
    # a regenerated row (the manifest lists rows as they finish): what the pipeline gives by hand
    line, = [line for line in lines if line["mask"].endswith("mask.png") and line["seed"] == 2]
    by_hand = pipe("red heart", seed=2, method="exact", window=4, image=files / "a.png",
                   mask=Image.open(files / "mask.png"))
    assert np.array_equal(np.asarray(Image.open(out / line["file"])), np.asarray(by_hand.images[0]))


def test_a_file_changed_after_loading_fails_its_rows_and_a_rerun_renders_the_new_one(models, files, write_job,
                                                                                     folder, tmp_path):
    job = write_job({"kind": "video", "model": str(models / "video"), "batch_size": 2,
                     "items": [{"prompt": "bounce apple", "num": 2, "image": "a.png"}, {"prompt": "red heart"}]})
    out = tmp_path / "out"
    render_job(job, out, progress=False)
    loaded = load_job(job)
    Image.new("RGB", (8, 8), (0, 200, 0)).save(files / "a.png")
    results = render_batch(load_pipeline("video", str(models / "video"), None, "cpu"), "video", loaded.outputs[:2])
    assert all("changed after the job was loaded" in r.error for r in results)  # no bytes of the wrong picture
    rerun = render_job(job, out, progress=False)
    assert (rerun["rendered"], rerun["skipped"]) == (2, 1)  # the new picture's outputs; red heart is done
    shas = [line.get("image_sha256") for line in folder(out).manifest]
    assert shas.count(sha(files / "a.png")) == 2 and len(set(shas)) == 3 and folder(out).verified()


def test_the_example_jobs_load_with_their_pictures():
    """configs/ must run out of the box: its pictures are there and its masks fit the bundled model's grid."""
    jobs = {path.stem: load_job(path) for path in sorted((Path(__file__).parents[2] / "configs").glob("*.yaml"))}
    assert {"image-to-video", "inpaint"} <= set(jobs)
    assert [sorted(o.inputs) for o in jobs["image-to-video"].outputs] == [["image"]] * 4 + [[]] * 2
    assert all(sorted(o.inputs) == ["image", "mask"] for o in jobs["inpaint"].outputs)
    # the fastest lossless setting measured at their batch sizes on a CPU (their comments cite the figures)
    assert {(o.settings["method"], o.settings["window"]) for job in jobs.values() for o in job.outputs} == {("exact", "auto")}

"""Job files for the render tests, pointing at the tiny models of tests/conftest.py."""
import hashlib
import json
import shutil

import pytest
import torch
import yaml


@pytest.fixture(scope="session")
def models(tiny_models, tmp_path_factory):
    """The tiny image and video models with their codebook spread wide: the tiny VQ's random codebook
    decodes most token grids to the same few pictures, which would make byte comparisons vacuous."""
    from diffusers import VQModel

    root = tmp_path_factory.mktemp("render-models")
    shutil.copytree(tiny_models, root, dirs_exist_ok=True)
    vq = VQModel.from_pretrained(root / "vq", low_cpu_mem_usage=False)
    with torch.no_grad():
        vq.quantize.embedding.weight.normal_(0, 3, generator=torch.Generator().manual_seed(0))
    vq.save_pretrained(root / "vq", safe_serialization=True)
    return root


@pytest.fixture
def write_job(tmp_path):
    """write_job(job dict, name=...) -> the path of a YAML job file in tmp_path."""
    def write(job: dict, name: str = "job.yaml"):
        path = tmp_path / name
        path.write_text(yaml.safe_dump(job, sort_keys=False))
        return path
    return write


@pytest.fixture
def image_job(models):
    """A small image job over the tiny image model: 3 prompts, 7 outputs, two settings groups."""
    return {"kind": "image", "model": str(models / "image"), "batch_size": 8,
            "defaults": {"method": "coupled", "window": 5, "sampling": {"temperature": 1.0, "top_k": 20}},
            "items": [{"prompt": "red heart", "seeds": [0, 1, 2]}, {"prompt": "apple", "num": 2},
                      {"prompt": "bounce", "seeds": [7, 8], "method": "exact"}]}


@pytest.fixture
def fit_job(models):
    """An exact job over the tiny image model, 5 outputs of one prompt, 3 rows a batch."""
    return {"kind": "image", "model": str(models / "image"), "batch_size": 3,
            "defaults": {"method": "exact", "window": 5, "sampling": {"temperature": 1.0, "top_k": 20}},
            "items": [{"prompt": "red heart", "num_outputs": 5}]}


@pytest.fixture
def room_for(fit_job, monkeypatch):
    """room_for(rows): the memory free (as mmspec.memory reads it) holds `rows` rows of fit_job's and not one more."""
    from mmspec import memory
    from mmspec.api import row_need
    from mmspec.pipelines import load_pipeline

    pipe, settings = load_pipeline("image", fit_job["model"], None, "cpu"), fit_job["defaults"]
    need = row_need(pipe.target, pipe.condition(["red heart"]), pipe.layout, method=settings["method"],
                    window=settings["window"], sampling={**pipe.default_sampling, **settings["sampling"]})

    def room(rows: int):
        free = int((memory.fixed_bytes() + rows * need) / memory.SHARE) + 1
        monkeypatch.setattr(memory, "free_bytes", lambda device: free)
    return room


class Folder:
    """What a render left in a folder: its manifest lines and its output files."""

    def __init__(self, path):
        self.path = path

    @property
    def manifest(self) -> list[dict]:
        return [json.loads(line) for line in (self.path / "manifest.jsonl").read_text().splitlines()]

    @property
    def files(self) -> dict:
        """File name -> bytes, the manifest and the lock left out."""
        return {p.name: p.read_bytes() for p in self.path.iterdir() if p.name not in ("manifest.jsonl", ".lock")}

    def verified(self) -> bool:
        """One line per output, each done line's file present with its hash, no other files."""
        lines = self.manifest
        done = [line for line in lines if line["status"] == "done"]
        return (len({line["id"] for line in lines}) == len(lines) and set(self.files) == {d["file"] for d in done}
                and all(hashlib.sha256(self.files[d["file"]]).hexdigest() == d["sha256"] for d in done))


@pytest.fixture
def folder():
    return Folder

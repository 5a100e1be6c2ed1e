"""One seed rule through every door: output j of a prompt gets seed + j, whatever else is in the batch, so a prompt and
seed give the same output through mmspec.generate, a pipeline (alone or in a list), the command line and a render job
(the demo calls the pipeline with its prompt and seed)."""
import torch
import yaml
from PIL import Image

import mmspec
from mmspec.cli import main
from mmspec.pipelines import ImagePipeline
from mmspec.render import render_job
from tiny import tiny_gpt


def test_generate_numbers_seeds_per_condition():
    target, layout = mmspec.ReferenceTarget(tiny_gpt(vocab_size=16)), mmspec.Grid2D(3, 3)
    both = mmspec.generate(target, torch.tensor([1, 2]), layout, method="ar", seed=5, num_outputs=2).tokens
    alone = mmspec.generate(target, torch.tensor([2]), layout, method="ar", seed=5, num_outputs=2).tokens
    assert torch.equal(both[2:], alone)
    second = mmspec.generate(target, torch.tensor([2]), layout, method="ar", seed=6).tokens
    assert torch.equal(alone[1:], second)  # output 1 of seed 5 is output 0 of seed 6


def test_a_prompt_in_a_list_gives_what_it_gives_alone_and_every_door_agrees(tiny_models, tmp_path):
    pipe = ImagePipeline.from_pretrained(tiny_models / "image", window_cache="off")
    listed = pipe(["red heart", "apple"], num_outputs=2, seed=3, method="coupled", window=4)
    alone = pipe("apple", num_outputs=2, seed=3, method="coupled", window=4)
    assert torch.equal(listed.tokens[2:], alone.tokens)
    expected = [img.tobytes() for img in alone.images]

    assert main(["generate", "image", "apple", "--model", str(tiny_models / "image"), "--seed", "3",
                 "--num-outputs", "2", "--method", "coupled", "--window", "4", "--out", str(tmp_path / "cli")]) == 0
    assert [Image.open(tmp_path / "cli" / f"image_00{i}.png").tobytes() for i in range(2)] == expected

    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"kind": "image", "model": str(tiny_models / "image"), "batch_size": 3, "items": [
        {"prompt": "red heart", "seeds": [3]}, {"prompt": "apple", "seeds": [3, 4], "method": "coupled", "window": 4}]}))
    render_job(job, tmp_path / "render", progress=False)
    rendered = sorted((tmp_path / "render").glob("apple-s*.png"))
    assert [Image.open(p).tobytes() for p in rendered] == expected  # (named -s3-, -s4-: in seed order)

"""benchmarks/engine_wallclock.py: the render job its arms run."""
from PIL import Image

from benchmarks.engine_wallclock import _job
from mmspec.bench import PROMPTS
from mmspec.render.job import load_job
from mmspec.render.run import make_batches


def test_a_job_of_given_first_frames_gives_each_prompt_its_picture_in_batches_of_one_picture(tmp_path):
    frames = {}
    for i, prompt in enumerate(PROMPTS["video"]):
        frames[prompt] = tmp_path / f"first-{i}.png"
        Image.new("RGB", (32, 32), (10 * i, 0, 0)).save(frames[prompt])
    job = load_job(_job("video", 8, 2, "ar", tmp_path, frames=frames))
    assert [o.inputs["image"]["path"] for o in job.outputs] == [str(frames[o.prompt]) for o in job.outputs]
    assert len({o.inputs["image"]["sha256"] for o in job.outputs}) == len(frames)
    batches = make_batches(job.outputs, job.batch_size)  # (one engine call takes one picture for all its rows)
    assert len(batches) == 4 and all(len({o.inputs["image"]["path"] for o in b}) == 1 for b in batches)
    drawn = load_job(_job("video", 8, 2, "ar", tmp_path))
    assert all(not o.inputs for o in drawn.outputs)


def test_calls_at_once_are_timed_against_one_after_another_and_each_gets_its_output_alone():
    import argparse

    from benchmarks.engine_wallclock import calls

    result = calls(argparse.Namespace(kind="text", calls=4, slots=2, rounds=1))
    assert result["outputs_as_alone"] and set(result["seconds"]) == {"one after another", "at once"}
    assert result["latency"]["p95"] >= result["latency"]["p50"] > 0

import pytest

from mmspec.render import load_job, render_job


@pytest.fixture(scope="module")
def ray():
    try:
        import ray
    except ImportError:
        print("skipping the Ray backend tests: Ray is not installed (pip install -e '.[ray]')")
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_gives_the_same_bytes_as_local(ray, image_job, write_job, folder, tmp_path):
    job = write_job({**image_job, "batch_size": 2})
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    render_job(job, local, progress=False)
    summary = render_job(job, on_ray, backend="ray", progress=False)
    assert (summary["rendered"], summary["failed"]) == (7, 0)
    assert folder(on_ray).files == folder(local).files and len(set(folder(local).files.values())) == 7
    assert folder(on_ray).verified() and ray.is_initialized()  # the caller's Ray instance is left running
    assert render_job(job, on_ray, backend="ray", progress=False)["skipped"] == 7


def test_an_actor_checks_the_job_s_batches_where_it_runs_and_says_why_they_do_not_fit(fit_job, write_job, room_for):
    from mmspec.render.executors import _Renderer
    from mmspec.render.run import make_batches

    job = load_job(write_job(fit_job))
    # (what a Ray actor holds, here in-process)
    actor = _Renderer(job.kind, job.model, job.draft, "cpu", job.compile, job.img_size)
    room_for(2)
    assert actor.check(make_batches(job.outputs, 2)) is None
    assert actor.check(make_batches(job.outputs, 3)).startswith("3 rows at a time need about")

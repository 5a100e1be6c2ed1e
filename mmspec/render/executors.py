"""Where batches render: in this process, or spread over Ray actors. The only part that differs.

An executor checks that the job's batches fit in memory where they will run (before the output folder is opened),
then maps batches to (batch, results) as they finish; the driver alone writes files and the manifest, so
exactly-once bookkeeping lives in one place whatever the backend.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Iterator

from mmspec.render.job import Job, Output
from mmspec.pipelines import load_pipeline
from mmspec.memory import DoesNotFit
from mmspec.render.worker import Result, check_batches, default_device, render_batch

Batches = Iterator[tuple[list[Output], list[Result]]]


class LocalExecutor:
    """Renders in this process on one engine of `batch_size` places (Pipeline.share_engines): `IN_FLIGHT` batches'
    calls are made at once from threads, so the rows of the next batch take the places of rows that finish, and a
    place never waits for the rest of its batch. Results come as batches finish (the bytes are those of any batch
    size); the driver writes them."""

    IN_FLIGHT = 3  # batches called at once: the one running, the one joining it, one ready behind them

    def __init__(self, job: Job):
        self.kind = job.kind
        self.pipe = load_pipeline(job.kind, job.model, job.draft, default_device(), compile=job.compile,
                                  door="render", img_size=job.img_size)
        self.pipe.share_engines(job.batch_size)

    def check(self, batches: list[list[Output]]) -> None:
        check_batches(self.pipe, batches)

    def map(self, batches: list[list[Output]]) -> Batches:
        pool = ThreadPoolExecutor(self.IN_FLIGHT, thread_name_prefix="mmspec-render")
        calls = {pool.submit(render_batch, self.pipe, self.kind, batch): batch for batch in batches}
        try:
            for call in as_completed(calls):
                yield calls[call], call.result()
        except BaseException:  # interrupted (Ctrl-C, SIGTERM): the running calls end at their next step
            self.pipe.engines.close(cancel=True)
            raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self):
        self.pipe.engines.close()


class RayExecutor:
    """One pipeline per actor: one actor per GPU of the cluster, else one per CPU (one thread each), no more than
    batches to render; the first checks the job's batches."""

    def __init__(self, job: Job, address: str | None):
        try:
            import ray
        except ImportError:
            raise ValueError('--backend ray needs Ray: pip install "mmspec[ray]"') from None
        self.ray, self.owns_ray = ray, not ray.is_initialized()
        if self.owns_ray:  # else the caller's ray.init() (a test, a notebook) is used and left running
            ray.init(address=address, log_to_driver=False)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        self.room = gpus or int(ray.cluster_resources().get("CPU", 1))
        options = {"num_gpus": 1} if gpus else {"num_cpus": 1}
        actor = ray.remote(_Renderer).options(**options)
        self.new_actor = lambda: actor.remote(job.kind, job.model, job.draft, "cuda" if gpus else "cpu", job.compile,
                                              job.img_size)
        self.actors = [self.new_actor()]

    def check(self, batches: list[list[Output]]) -> None:
        error = self.ray.get(self.actors[0].check.remote(batches))
        if error is not None:
            raise DoesNotFit(error)

    def map(self, batches: list[list[Output]]) -> Batches:
        from ray.util import ActorPool

        self.actors += [self.new_actor() for _ in range(min(len(batches), self.room) - len(self.actors))]
        pool = ActorPool(self.actors)
        for i, results in pool.map_unordered(lambda a, i: a.render.remote(i, batches[i]), range(len(batches))):
            yield batches[i], results

    def close(self):
        for actor in self.actors:
            self.ray.kill(actor)
        if self.owns_ray:
            self.ray.shutdown()


class _Renderer:
    """A Ray actor holding one pipeline."""

    def __init__(self, kind: str, model: str | None, draft: str | None, device: str, compile: bool,
                 img_size: int | None):
        self.kind, self.pipe = kind, load_pipeline(kind, model, draft, device, compile=compile, door="render",
                                                   img_size=img_size)

    def check(self, batches: list[list[Output]]) -> "str | None":
        """The one line that refuses the batches (mmspec.memory.DoesNotFit's), or None when they fit."""
        try:
            check_batches(self.pipe, batches)
        except DoesNotFit as err:
            return str(err)
        return None

    def render(self, index: int, batch: list[Output]) -> tuple[int, list[Result]]:
        return index, render_batch(self.pipe, self.kind, batch)


def make_executor(job: Job, backend: str, address: str | None):
    if backend == "local":
        return LocalExecutor(job)
    if backend == "ray":
        return RayExecutor(job, address)
    raise ValueError(f"unknown backend {backend!r}; choose local or ray")

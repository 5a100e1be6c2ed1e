"""A render job end to end: validate, load the model and check that the batches fit, lock the folder, skip what is
done, batch the rest, record each output."""
from __future__ import annotations

from pathlib import Path

from mmspec.memory import DoesNotFit
from mmspec.render.executors import make_executor
from mmspec.render.job import Job, JobError, Output, load_job
from mmspec.render.progress import Progress
from mmspec.render.store import MANIFEST, OutputFolder
from mmspec.render.worker import Result


def render_job(job_path: "str | Path", out: "str | Path", *, backend: str = "local", ray_address: str | None = None,
               batch_size: int | None = None, progress: bool = True) -> dict:
    """Render every output of the job into `out` that is not done there yet; -> a summary dict
    (total, skipped, rendered, failed, seconds, outputs_per_minute, tokens_per_second, manifest)."""
    job = load_job(job_path, batch_size)  # a malformed job fails here, before the folder is touched
    executor = make_executor(job, backend, ray_address)
    try:
        _check(executor, job, Path(job_path))  # batches too large for the memory there: before the folder is touched
        with OutputFolder(out) as folder:
            todo = [o for o in job.outputs if o.id not in folder.done]
            bar = Progress(len(job.outputs), len(job.outputs) - len(todo), progress)
            try:
                for batch, results in executor.map(make_batches(todo, job.batch_size)):
                    for output, result in zip(batch, results):
                        folder.record(_line(job, output, result, folder))
                        bar.update(result.data is None, result.tokens)
            finally:
                summary = bar.close()
    finally:
        executor.close()
    return {**summary, "manifest": str(Path(out) / MANIFEST)}


def _check(executor, job: Job, path: Path) -> None:
    """Refuses the job in one line naming its batch_size when its batches do not fit where the executor runs them."""
    try:
        executor.check(make_batches(job.outputs, job.batch_size))
    except DoesNotFit as err:
        raise JobError(f"{path.name}: batch_size: {err}; nothing was rendered") from None


def make_batches(outputs: list[Output], size: int) -> list[list[Output]]:
    """Outputs of the same settings and input files, in job order, cut into engine calls of `size` rows."""
    groups: dict[str, list[Output]] = {}
    for output in outputs:
        groups.setdefault(output.group, []).append(output)
    return [group[i:i + size] for group in groups.values() for i in range(0, len(group), size)]


def _line(job: Job, output: Output, result: Result, folder: OutputFolder) -> dict:
    line = {"id": output.id, "prompt": output.prompt, "seed": output.seed, "file": output.file}
    if result.data is None:
        line.update(status="failed", error=result.error)
    else:
        line.update(sha256=folder.write(output.file, result.data), status="done", nfe=result.nfe,
                    tokens=result.tokens, seconds=round(result.seconds, 4))
    for key, file in output.inputs.items():  # which picture the output came from, and its bytes' hash
        line.update({key: file["path"], f"{key}_sha256": file["sha256"]})
    return {**line, "kind": job.kind, "model": job.model, **output.settings}

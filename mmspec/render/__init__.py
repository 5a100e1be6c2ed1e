"""Offline batch rendering jobs: resumable, exactly-once, on one machine or a Ray cluster.

job file -> outputs (job.py, named by naming.py) -> batches -> executor (executors.py, worker.py)
-> atomic files + manifest (store.py), with a progress bar (progress.py); run.py ties them together.
"""
from mmspec.render.job import Job, JobError, Output, load_job
from mmspec.render.run import render_job
from mmspec.render.store import FolderLocked, ManifestError

__all__ = ["render_job", "load_job", "Job", "Output", "JobError", "FolderLocked", "ManifestError"]

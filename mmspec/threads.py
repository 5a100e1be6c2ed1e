"""CPU threads for torch in the processes mmspec owns (the CLI's generate, render and demo).

torch runs an op on as many threads as the machine has cores, and every op ends at a barrier that waits for all
of them. When other work holds some cores, a thread that lost its core keeps the others waiting for a time slice
at every op: on the 2-core machine this was measured on, the README's image took 30 s with 2 threads while one
other single-threaded process ran, and 1.0 s with 1 thread (quiet, 1 and 2 threads tie on the bundled models: their
ops are too small to share). So the CLI gives torch no more threads than there are free cores, unless told.

The library itself never changes the process's threads: a caller of `mmspec.generate` or a pipeline owns them
(`torch.set_num_threads`).
"""
from __future__ import annotations

import os

import torch


def busy_cores() -> float:
    """Cores other work holds now: the larger of the 1-minute load average and the processes running this instant
    (Linux's /proc/loadavg; the average lags a process that has just started), less this one."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    try:
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0]) - 1  # (this process is running while it reads)
    except (OSError, ValueError, IndexError):
        running = 0
    return max(load, float(running))


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cpu_threads(requested: int | None = None) -> int:
    """`requested` if given (>= 1); torch's own count where the environment set it (OMP_NUM_THREADS,
    MKL_NUM_THREADS); else torch's count, but no more than the cores free now (at least 1)."""
    if requested is not None:
        if requested < 1:
            raise ValueError(f"--threads must be >= 1, got {requested}")
        return requested
    if any(os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")):
        return torch.get_num_threads()
    free = cores() - busy_cores()
    return max(1, min(torch.get_num_threads(), int(free + 0.5)))


def use_cpu_threads(requested: int | None = None) -> int:
    """Set torch's threads to `cpu_threads(requested)`; the count."""
    threads = cpu_threads(requested)
    torch.set_num_threads(threads)
    return threads

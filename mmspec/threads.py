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
import time

import torch


def busy_cores(interval: float = 0.1) -> float:
    """Cores other work holds now: on Linux the share of CPU time not idle over `interval` seconds (/proc/stat; this
    process sleeps meanwhile), times the cores; elsewhere the 1-minute load average (which lags: right after a
    `pip install` it still counts one core busy)."""
    try:
        before = _cpu_times()
        time.sleep(interval)
        after = _cpu_times()
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    total, idle = (a - b for a, b in zip(after, before))
    return (os.cpu_count() or 1) * (1 - idle / total) if total > 0 else 0.0


def _cpu_times() -> tuple[int, int]:
    """(all, idle + iowait) CPU time of the machine so far, in clock ticks (the first line of /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields[:8]), fields[3] + fields[4]  # (guest time is already in user time)


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

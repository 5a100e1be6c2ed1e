"""CPU threads for torch in the processes mmspec owns (the CLI's generate, render and demo).

torch runs an op on as many threads as the machine has cores, and every op ends at a barrier that waits for all
of them. When other work holds some cores, a thread that lost its core keeps the others waiting for a time slice
at every op: on the 2-core machine this was measured on, the README's image took 30 s with 2 threads while one
other single-threaded process ran, and 1.0 s with 1 thread (quiet, 1 and 2 threads tie on the bundled models: their
ops are too small to share). So the CLI gives torch no more threads than there are free cores, unless told.

A library call (`mmspec.generate`, a pipeline's loading and calls) makes the same choice for its own duration and
restores the caller's count after it (`call_threads`), unless the caller chose: torch.set_num_threads since mmspec
loaded, OMP_NUM_THREADS or MKL_NUM_THREADS, or the CLI's --threads.
"""
from __future__ import annotations

import functools
import inspect
import os
import threading
import time
from contextlib import contextmanager
from typing import Callable

import torch

_TORCH_DEFAULT = torch.get_num_threads()  # torch's count when mmspec loaded: another count later is the caller's
_CACHE_SECONDS = 10.0  # a library call's choice holds this long: calls in a loop measure the load once, not each time
_lock = threading.Lock()
_scope = {"depth": 0, "restore": None, "chosen": None, "at": -_CACHE_SECONDS, "process": False}


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
    """Set torch's threads to `cpu_threads(requested)` for the rest of the process (the CLI's choice: library calls
    keep it); the count."""
    threads = cpu_threads(requested)
    torch.set_num_threads(threads)
    _scope["process"] = True
    return threads


def caller_chose() -> bool:
    """Whether the threads are the caller's choice: set by use_cpu_threads, by the environment, or to a count other
    than torch's own since mmspec loaded."""
    return _scope["process"] or torch.get_num_threads() != _TORCH_DEFAULT \
        or any(os.environ.get(name) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"))


@contextmanager
def call_threads(device: "torch.device | str" = "cpu"):
    """A library call's CPU threads: the CLI's choice (no more than the cores free; `cpu_threads`) while it runs,
    the caller's count again after it. Nothing changes on an accelerator, where the caller chose (`caller_chose`),
    or inside another such call (a video pipeline's first-frame image pipeline, concurrent calls in a demo: the
    outermost sets and restores). The free cores are measured at most every _CACHE_SECONDS."""
    with _lock:
        enter = _scope["depth"] > 0 or (torch.device(device).type == "cpu" and not caller_chose())
        if enter:
            if _scope["depth"] == 0:
                now = time.monotonic()
                if now - _scope["at"] > _CACHE_SECONDS:
                    _scope["chosen"], _scope["at"] = cpu_threads(), now
                _scope["restore"] = torch.get_num_threads()
                torch.set_num_threads(_scope["chosen"])
            _scope["depth"] += 1
    try:
        yield
    finally:
        if enter:
            with _lock:
                _scope["depth"] -= 1
                if _scope["depth"] == 0:
                    torch.set_num_threads(_scope["restore"])


def scoped(device_of: "Callable[..., torch.device] | str"):
    """Decorate a library entry point to run under `call_threads(device)`: device_of(*args, **kwargs), or the
    argument of that name (its default when not given)."""
    def wrap(fn):
        signature = inspect.signature(fn)

        def device(args, kwargs):
            if callable(device_of):
                return device_of(*args, **kwargs)
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return bound.arguments[device_of]

        @functools.wraps(fn)
        def call(*args, **kwargs):
            with call_threads(device(args, kwargs)):
                return fn(*args, **kwargs)
        return call
    return wrap


def module_device(holder) -> torch.device:
    """The device of the weights of `holder.model` (a target's, a pipeline's target's); CPU when it holds none."""
    model = getattr(holder, "model", None)
    try:
        return next(model.parameters()).device
    except (AttributeError, StopIteration, TypeError):
        return torch.device("cpu")

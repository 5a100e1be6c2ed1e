"""Ctrl-C in the processes the command line owns: at any moment, exit 130 and one line, within GRACE seconds.

Python's own handler raises KeyboardInterrupt wherever the main thread is. Before the command's `try` (while torch
imports) that printed the import machinery's traceback, and a library's bare `except:` can swallow it: a run
interrupted while its modules loaded went on to its end. So the command line installs this handler before it imports
anything heavy. It still raises KeyboardInterrupt, so that `finally` blocks remove temporary files and a render job's
store keeps what is complete; and it starts a timer that ends the process with the same line and status when the
exception has not ended it GRACE seconds later (swallowed, or the main thread held in native code). A second Ctrl-C
ends it at once."""
from __future__ import annotations

import atexit
import os
import signal
import sys
import threading

STATUS = 130  # what a shell reports for a process that SIGINT ended
GRACE = 1.5  # seconds the exception has to end the process before the timer does
_state = {"received": False, "said": False, "kept": "no partial file was written"}


def install() -> None:
    """Ctrl-C raises KeyboardInterrupt now and ends the process GRACE seconds later at the latest."""
    signal.signal(signal.SIGINT, _handle)


def received() -> bool:
    """Whether Ctrl-C came: an error raised after it (a child process it also stopped, ffmpeg's pipe) is its doing."""
    return _state["received"]


def keep(kept: str) -> None:
    """What the line says is left behind, once the command is known (a render job: its manifest)."""
    _state["kept"] = kept


def report() -> int:
    """Says the one line -> the exit status."""
    _state["said"] = True
    line = f"mmspec: interrupted: {_state['kept']}"
    bars = sys.modules.get("tqdm")  # a progress bar drawn from the decoding thread may hold the line: tqdm's write
    if bars is not None:  # clears the bars, says the line on one of its own, and draws them again after it
        bars.tqdm.write(line, file=sys.stderr)
        sys.stderr.flush()
    else:
        print(line, file=sys.stderr, flush=True)
    return STATUS


def end(status: int) -> None:
    """Ends an interrupted command's process now: its exit functions run (temporary folders, a local Ray cluster),
    not the interpreter's teardown of every module it loaded, which took 1-2 s on a busy machine."""
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(status)


def _handle(signum, frame) -> None:
    if _state["received"]:
        _exit()
    _state["received"] = True
    timer = threading.Timer(GRACE, _exit)
    timer.daemon = True  # (it must not keep alive a process that ends on its own)
    timer.start()
    raise KeyboardInterrupt


def _exit() -> None:
    if not _state["said"]:  # (the command said it and is ending: its threads, a server's, hold it)
        print(file=sys.stderr)  # (off a progress bar's line, which the main thread did not get to clear)
        report()
    os._exit(STATUS)

"""Ctrl-C as a terminal sends it, at a chosen moment of a real `mmspec` process: SIGINT to the process group of a
command started in its own group (its ffmpeg and Ray children get it too), with SIGINT at its default in the child
(a shell's background job would inherit it ignored). Moments are told by what the child shows (its memory map, its
output, its files), not by sleeps: the suite's machine may be slow."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECONDS = 5.0  # from Ctrl-C to exit at most: the process ends itself within mmspec.interrupt.GRACE, plus a busy machine
LINE = "mmspec: interrupted: "


class Command:
    """`python -m mmspec ARGS` (the `mmspec` command's module; `program`: other python arguments before ARGS) in
    `cwd`, its output read as it comes."""

    def __init__(self, args: list[str], cwd: Path, program: tuple[str, ...] = ("-m", "mmspec")):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen([sys.executable, *program, *map(str, args)], cwd=cwd, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_own_group)
        self.out, self.err = bytearray(), bytearray()
        self.readers = [threading.Thread(target=_read, args=(pipe, into), daemon=True)
                        for pipe, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self.readers:
            reader.start()

    def when(self, ready, timeout: float = 180) -> "Command":
        """Waits until ready(self) (the process still running)."""
        deadline = time.monotonic() + timeout
        while not ready(self):
            assert self.proc.poll() is None, f"it ended first (exit {self.proc.returncode}): {self.err.decode()}"
            assert time.monotonic() < deadline, "the moment never came"
            time.sleep(0.01)
        return self

    def mapped(self, name: str) -> bool:
        """Whether a file whose path holds `name` is in the process's memory map (a library it is loading)."""
        try:
            return name in Path(f"/proc/{self.proc.pid}/maps").read_text()
        except OSError:
            return False

    def interrupt(self) -> "Command":
        """Ctrl-C now; returns when the process has ended, asserting that it ended as a Ctrl-C should."""
        os.killpg(self.proc.pid, signal.SIGINT)
        sent = time.monotonic()
        self.proc.wait(timeout=60)
        seconds = time.monotonic() - sent
        for reader in self.readers:
            reader.join(10)
        err = self.err.decode(errors="replace")
        lines = [line for line in re.split(r"[\r\n]", err) if line.strip() and "%|" not in line]  # (not progress bars)
        said = f"exit {self.proc.returncode} {seconds:.1f} s after Ctrl-C: {err}"
        assert self.proc.returncode == 130 and lines and lines[-1].startswith(LINE), said  # (before it: a notice...)
        assert sum(line.startswith(LINE) for line in lines) == 1 and all(line.startswith("mmspec: ") for line in lines), said
        assert seconds < SECONDS, f"{seconds:.1f} s from Ctrl-C to exit"
        return self


def _own_group():
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _read(pipe, into: bytearray) -> None:
    while chunk := os.read(pipe.fileno(), 65536):
        into += chunk


def no_partial_file(folder: Path) -> bool:
    """Nothing half-written in `folder`: no file of write_file's or the render store's temporary names."""
    return not [p for p in folder.rglob("*") if p.name.startswith(".") and ".part" in p.name or ".tmp-" in p.name]

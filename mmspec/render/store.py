"""The output folder: a lock, atomic files, and an append-only manifest that survives any kill.

Order of a write: the bytes go to a temporary file in the folder, are fsynced and renamed onto the
output's name (the folder is fsynced too), and only then is the manifest line appended and fsynced.
A kill can thus leave a temporary file (removed on the next start), a complete output without its
line (rendered again: same name, same bytes) or a torn last line (cut off on the next start), but
never a line whose file is missing or partial.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

MANIFEST, LOCK, TMP_PREFIX = "manifest.jsonl", ".lock", ".tmp-"


class FolderLocked(ValueError):
    """Another process is rendering into the same folder."""


class ManifestError(ValueError):
    """A manifest line that no kill can produce (edited by hand): it is reported, not guessed at."""


class OutputFolder:
    """Opened under an exclusive lock (released by the OS however the process ends)."""

    def __init__(self, path: "str | Path"):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(self.path / LOCK)
        try:
            for leftover in self.path.glob(TMP_PREFIX + "*"):
                leftover.unlink()
            self.done = self._load_manifest()  # id -> its verified manifest line
            self._manifest = os.open(self.path / MANIFEST, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except BaseException:
            os.close(self._lock)
            raise

    def write(self, name: str, data: bytes) -> str:
        """Atomically put `data` at `name`; -> its sha256."""
        tmp = self.path / f"{TMP_PREFIX}{name}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path / name)
        except BaseException:  # a full disk, a Ctrl-C: no partial file stays (a kill's is removed on the next start)
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(self.path)
        return hashlib.sha256(data).hexdigest()

    def record(self, line: dict):
        """Append one manifest line in a single write, and make it durable before going on."""
        os.write(self._manifest, (json.dumps(line, ensure_ascii=True) + "\n").encode())
        os.fsync(self._manifest)
        if line["status"] == "done":
            self.done[line["id"]] = line

    def close(self):
        os.close(self._manifest)
        os.close(self._lock)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _load_manifest(self) -> dict:
        """Repair a torn last line, keep the last line per id whose file verifies, rewrite if that changed."""
        path = self.path / MANIFEST
        raw = path.read_bytes() if path.exists() else b""
        complete = raw[:raw.rfind(b"\n") + 1]  # a line without its newline was cut by a kill
        lines = {}
        for n, text in enumerate(complete.decode(errors="replace").splitlines(), 1):
            try:
                line = json.loads(text)
                lines[line["id"]] = line
            except (json.JSONDecodeError, TypeError, KeyError):
                raise ManifestError(f"{path} line {n} is not a manifest line: {text[:200]!r}; "
                                    "fix or delete it (outputs without a line are rendered again)") from None
        done = {oid: line for oid, line in lines.items() if line.get("status") == "done" and self._verifies(line)}
        kept = b"".join((json.dumps(line, ensure_ascii=True) + "\n").encode() for line in done.values())
        if kept != raw:  # failed, superseded and unverifiable lines go: their outputs are redone and re-recorded
            self.write(MANIFEST, kept)
        return done

    def _verifies(self, line: dict) -> bool:
        name = line.get("file")
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            return False
        path = self.path / name
        return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == line.get("sha256")


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise FolderLocked(f"{path.parent} is in use by another mmspec render (pid {holder}); wait for it to end "
                           "or choose another --out") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _fsync_dir(path: Path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

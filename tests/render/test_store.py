import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmspec.render import FolderLocked, ManifestError, render_job
from mmspec.render.store import OutputFolder

REPO = Path(__file__).resolve().parents[2]


def done_line(oid: str, name: str, data: bytes) -> dict:
    return {"id": oid, "file": name, "sha256": hashlib.sha256(data).hexdigest(), "status": "done"}


def test_writes_are_atomic_and_recorded(tmp_path, folder):
    with OutputFolder(tmp_path) as out:
        line = done_line("a", "a.png", b"bytes")
        assert out.write("a.png", b"bytes") == line["sha256"]
        out.record(line)
        assert out.done == {"a": line}
    assert folder(tmp_path).manifest == [line] and folder(tmp_path).files == {"a.png": b"bytes"}


def test_opening_repairs_what_a_kill_leaves(tmp_path):
    (tmp_path / "a.png").write_bytes(b"A")
    (tmp_path / "b.png").write_bytes(b"changed after it was recorded")
    (tmp_path / ".tmp-c.png").write_bytes(b"half")  # a kill between write and rename
    lines = [done_line("a", "a.png", b"A"), done_line("b", "b.png", b"B"), {"id": "c", "status": "failed"},
             done_line("d", "../d.png", b"")]
    text = "".join(json.dumps(line) + "\n" for line in lines) + '{"id": "e", "fi'  # torn by a kill mid-append
    (tmp_path / "manifest.jsonl").write_text(text)
    with OutputFolder(tmp_path) as out:
        assert list(out.done) == ["a"]  # b no longer verifies, c failed, d's name leaves the folder
    assert (tmp_path / "manifest.jsonl").read_text() == json.dumps(lines[0], ensure_ascii=True) + "\n"
    assert not list(tmp_path.glob(".tmp-*"))


def test_a_hand_edited_line_is_reported_not_guessed(tmp_path):
    (tmp_path / "manifest.jsonl").write_text('{"id": "a"}\nnot json\n{"id": "b"}\n')
    with pytest.raises(ManifestError, match="manifest.jsonl line 2 is not a manifest line"):
        OutputFolder(tmp_path)
    OutputFolder(tmp_path / "other").close()  # the lock was released on the way out


def test_a_second_process_on_the_same_folder_refuses(image_job, write_job, tmp_path):
    job, out = write_job(image_job), tmp_path / "out"
    with OutputFolder(out):
        with pytest.raises(FolderLocked, match=f"in use by another mmspec render \\(pid {os.getpid()}\\)"):
            render_job(job, out, progress=False)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        second = subprocess.run([sys.executable, "-m", "mmspec.cli", "render", str(job), "--out", str(out)],
                                env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and "in use by another mmspec render" in second.stderr
    assert render_job(job, out, progress=False)["rendered"] == 7  # free again once the first has ended

"""A render job on a disk that fills up, a read-only folder, a Ctrl-C: one line, and the manifest lists every
complete file, so a rerun resumes. Batches too large for the memory free: one line before any work."""
from mmspec.cli import main


def _one_line(capsys, *parts) -> str:
    """The one line of stderr besides the progress bar."""
    err = capsys.readouterr().err
    lines = [line for line in err.split("\n") if line.strip() and not line.startswith("\r")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert all(part in err for part in parts), err
    return err


def _render_argv(image_job, write_job, out):
    return ["render", str(write_job(image_job)), "--out", str(out)]


def test_a_full_disk_in_render_is_one_line_and_a_rerun_resumes(image_job, write_job, folder, tmp_path, capsys,
                                                               monkeypatch):
    import errno
    import os

    import mmspec.render.store as store

    out, real, writes = tmp_path / "out", os.fsync, []

    def fsync(fd):  # the disk fills up while the third output's bytes are written
        writes.append(fd)
        if len(writes) == 6:  # (each output: its file, the folder, its manifest line)
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)
    monkeypatch.setattr(store.os, "fsync", fsync)
    assert main(_render_argv(image_job, write_job, out)) == 2
    _one_line(capsys, f"cannot write to --out {out} (No space left on device)", "the manifest there lists every "
              "complete file", "rerun: only what is missing is rendered")
    assert folder(out).verified() and len(folder(out).manifest) == 2  # no partial file, no line without its file
    monkeypatch.setattr(store.os, "fsync", real)
    assert main(_render_argv(image_job, write_job, out)) == 0
    assert folder(out).verified() and len(folder(out).manifest) == 7


def test_a_read_only_folder_in_render_is_one_line_before_any_work(image_job, write_job, tmp_path, capsys,
                                                                  monkeypatch):
    import errno

    import mmspec.render.store as store

    def read_only(*args, **kw):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "out" / ".lock"))
    monkeypatch.setattr(store.os, "open", read_only)
    assert main(_render_argv(image_job, write_job, tmp_path / "out")) == 2
    _one_line(capsys, "(Read-only file system)", "the manifest there lists every complete file")


def test_ctrl_c_in_render_says_the_manifest_is_intact(image_job, write_job, folder, tmp_path, capsys, monkeypatch):
    import mmspec.render.run as run

    out, real = tmp_path / "out", run._line
    calls = []

    def interrupted(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)
    monkeypatch.setattr(run, "_line", interrupted)
    assert main(_render_argv(image_job, write_job, out)) == 130
    _one_line(capsys, "mmspec: interrupted: the manifest lists every complete file and a rerun renders only what is "
              "missing")
    assert folder(out).verified() and len(folder(out).manifest) == 2


def test_a_batch_size_that_does_not_fit_is_refused_in_one_line_before_the_folder_is_touched(fit_job, write_job, folder,
                                                                                             room_for, tmp_path, capsys):
    job, out = fit_job, tmp_path / "out"
    room_for(2)
    assert main(["render", str(write_job(job)), "--out", str(out), "--batch-size", "2"]) == 0
    assert len(folder(out).manifest) == 5
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()}
    more = {**job, "items": job["items"] + [{"prompt": "apple", "num_outputs": 3}]}  # work to do, 3 rows at a time
    assert main(["render", str(write_job(more)), "--out", str(out)]) == 2
    _one_line(capsys, "job.yaml: batch_size: 3 rows at a time need about", "which holds 2 rows: pass batch_size=2 "
              "(CLI: --batch-size 2); nothing was rendered")
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.iterdir()} == before  # the manifest too
    assert main(["render", str(write_job(more)), "--out", str(tmp_path / "new"), "--batch-size", "4"]) == 2
    _one_line(capsys, "batch_size: 4 rows at a time need about", "which holds 2 rows")
    assert not (tmp_path / "new").exists()
    room_for(0)
    assert main(["render", str(write_job(more)), "--out", str(out), "--batch-size", "1"]) == 2
    _one_line(capsys, "batch_size: 1 row at a time needs about", "which holds not even one row")

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from mmspec.cli import main
from mmspec.render import load_job, render_job

REPO = Path(__file__).resolve().parents[2]


def test_a_job_renders_and_a_second_run_does_nothing(image_job, write_job, folder, tmp_path):
    job, out = write_job(image_job), tmp_path / "out"
    first = render_job(job, out, progress=False)
    assert (first["total"], first["rendered"], first["skipped"], first["failed"]) == (7, 7, 0, 0)
    rendered = folder(out)
    assert rendered.verified() and len(set(rendered.files.values())) == 7
    assert {(line["prompt"], line["seed"]) for line in rendered.manifest} == {
        ("red heart", 0), ("red heart", 1), ("red heart", 2), ("apple", 0), ("apple", 1), ("bounce", 7), ("bounce", 8)}
    line, = [line for line in rendered.manifest if (line["prompt"], line["seed"]) == ("red heart", 0)]
    assert line["status"] == "done" and line["nfe"] >= 1 and line["method"] == "coupled" and line["window"] == 5
    mtimes = {p: p.stat().st_mtime_ns for p in out.iterdir()}
    second = render_job(job, out, progress=False)
    assert (second["rendered"], second["skipped"]) == (0, 7)
    assert {p: p.stat().st_mtime_ns for p in out.iterdir() if p.name != ".lock"} == \
        {p: t for p, t in mtimes.items() if p.name != ".lock"}


def test_batch_size_does_not_change_a_byte(image_job, models, write_job, folder, tmp_path):
    video = {**image_job, "kind": "video", "model": str(models / "video")}
    for name, job in (("image", image_job), ("video", video)):
        one, eight = tmp_path / f"{name}1", tmp_path / f"{name}8"
        render_job(write_job(job), one, batch_size=1, progress=False)
        render_job(write_job(job), eight, batch_size=8, progress=False)
        assert folder(one).files == folder(eight).files and len(set(folder(one).files.values())) == 7


LONG = "<s>" + " w3" * 130  # 131 tokens: with 6 new ones, past the tiny model's context of 128


def test_text_job_batches_alike_and_a_failing_item_is_recorded(tiny_text, write_job, folder, tmp_path, capsys):
    job = write_job({"kind": "text", "model": str(tiny_text / "target"), "draft": str(tiny_text / "draft"),
                     "defaults": {"method": "draft-model", "window": 3, "max_new_tokens": 6, "num": 2},
                     "items": [{"prompt": "<s> w3 w4"}, {"prompt": LONG}, {"prompt": "<s> w9", "method": "ar"},
                               {"prompt": "<s> w5", "method": {"name": "draft-model", "proactive": [3, 2]}}]})
    out = tmp_path / "out"
    assert main(["render", str(job), "--out", str(out)]) == 1  # the prompt too long for the context fails its rows
    lines = {(line["prompt"], line["seed"]): line for line in folder(out).manifest}
    assert [k for k, line in lines.items() if line["status"] == "failed"] == [(LONG, 0), (LONG, 1)]
    assert "context of 128" in lines[(LONG, 0)]["error"] and folder(out).verified()
    printed = capsys.readouterr()
    assert "rendered=6 failed=2" in printed.out  # the summary; the bar counts and rates on stderr
    assert "8/8, done 6, failed 2" in printed.err and "out/min" in printed.err and "tok/s" in printed.err
    single = tmp_path / "single"
    render_job(job, single, batch_size=1, progress=False)
    assert folder(single).files == folder(out).files
    assert folder(out).files[lines[("<s> w3 w4", 0)]["file"]].startswith(b"<s> w3 w4")
    assert main(["render", str(job), "--out", str(out)]) == 1  # failed outputs are retried, and fail again
    assert len(folder(out).manifest) == 8 and folder(out).verified()


def test_hostile_prompts_stay_inside_the_folder(image_job, write_job, folder, tmp_path):
    prompts = ["../../etc/passwd", "/abs/path", "a/b\\c", "..", ".", "-", "x" * 10_000, "red\x00heart\n\r\t\x1b[31m",
               "heart" + "\u202e" + "gnp.exe", "~user/$HOME `rm -rf /`"]
    job = write_job({**image_job, "items": [{"prompt": p} for p in prompts]})
    out = tmp_path / "out"
    assert render_job(job, out, progress=False)["rendered"] == len(prompts)
    names = set(folder(out).files)
    assert len(names) == len(prompts) and folder(out).verified()
    assert all("/" not in n and "\\" not in n and not n.startswith(".") and len(n) < 100 and n.isprintable()
               for n in names)
    assert [p.name for p in (tmp_path / "out").iterdir()] and not list(tmp_path.glob("*.png"))
    assert sorted(line["prompt"] for line in folder(out).manifest) == sorted(prompts)  # (in the order they finish)


def test_sigkill_mid_job_then_rerun_gives_each_output_exactly_once(image_job, write_job, folder, tmp_path):
    job = write_job({**image_job, "batch_size": 1, "items": [{"prompt": f"red heart {i}", "num": 4} for i in range(15)]})
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mmspec.cli", "render", str(job), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}  # tiny models run faster on one thread of a shared machine
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    manifest = out / "manifest.jsonl"
    deadline = time.monotonic() + 120
    while not (manifest.exists() and manifest.read_bytes().count(b"\n") >= 5) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the job ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = manifest.read_bytes().count(b"\n")
    assert 5 <= killed_at < 60
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"skipped={killed_at} rendered={60 - killed_at} failed=0" in rerun.stdout
    rendered = folder(out)
    assert rendered.verified() and len(rendered.manifest) == 60 and len(rendered.files) == 60
    assert {line["id"] for line in rendered.manifest} == {o.id for o in load_job(job).outputs}
    assert not list(out.glob(".tmp-*"))


def test_an_eagle_job_gives_ars_texts_with_exact(tiny_heads, write_job, folder, tmp_path):
    job = {"kind": "text", "model": str(tiny_heads / "text"), "defaults": {"window": 3, "max_new_tokens": 6},
           "items": [{"prompt": "<s> w3 w4", "num": 2}, {"prompt": "<s> w9"}]}
    texts = {}
    for name, method in (("ar", "ar"), ("eagle", {"name": "eagle", "exact": True})):
        out = tmp_path / name
        render_job(write_job({**job, "defaults": {**job["defaults"], "method": method}}, f"{name}.yaml"), out,
                   progress=False)
        texts[name] = {(line["prompt"], line["seed"]): folder(out).files[line["file"]] for line in folder(out).manifest}
    assert texts["eagle"] == texts["ar"] and len(texts["ar"]) == 3


def test_ctrl_c_mid_job_ends_in_one_line_and_keeps_what_is_complete(image_job, write_job, folder, tmp_path):
    from interrupting import Command, no_partial_file

    job = write_job({**image_job, "batch_size": 1, "items": [{"prompt": f"red heart {i}", "num": 4} for i in range(15)]})
    out, manifest = tmp_path / "out", tmp_path / "out" / "manifest.jsonl"
    Command(["render", job, "--out", out], tmp_path).when(
        lambda c: manifest.exists() and manifest.read_bytes().count(b"\n") >= 2).interrupt()
    rendered = folder(out)
    assert rendered.verified() and 2 <= len(rendered.manifest) < 60 and no_partial_file(out)

"""Peak memory of `mmspec generate image "red heart" --num-outputs N` against the estimate its batches were planned on.

Runs the CLI in this process twice: `--num-outputs 1` (imports, the model, one row: the baseline), then with N. The peak
resident memory (VmHWM) after each; what the second added over the first is what its batches took, which must stay
under the estimate mmspec.memory made for them (rows at a time x bytes per row + the fixed part). `--batches K` stops
the request once K times the rows run at a time have finished (the engine's places hold the same rows all along, so
the first of them hold the peak: on a 2-core CPU ~1400 rows take minutes). With --device cuda, the pipeline on the GPU and torch's peak
allocated memory instead. Prints one JSON object; --out keeps it.

  python benchmarks/memory_peak.py --num 10000 [--batches 1] [--device cpu] [--out benchmarks/results/memory_peak]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import torch

import mmspec.api
import mmspec.engine
from mmspec import memory
from mmspec.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]


def peak_rss() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


class Enough(Exception):
    """The batches asked for have run."""


def run(num: int, folder: Path, device: str) -> float:
    start = time.perf_counter()
    if device == "cpu":
        assert cli(["generate", "image", "red heart", "--num-outputs", str(num), "--out", str(folder), "--json"]) == 0
    else:
        from mmspec.pipelines import ImagePipeline

        ImagePipeline.from_pretrained(device=device, window_cache="off")("red heart", num_outputs=num).save(folder)
    return time.perf_counter() - start


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num", type=int, default=10000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batches", type=int, help="stop after this many batches (default: all)")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    plans: list = []
    real, row_done, ran = memory.rows_at_once, mmspec.engine._Request.done, []

    def one_row(request, *args, **kw):  # (a row handed over by the engine)
        row_done(request, *args, **kw)
        ran.append(1)
        if a.batches and len(ran) >= a.batches * plans[-1]["rows_at_once"] and len(ran) < request.rows:
            raise Enough

    def rows_at_once(per_row, rows, device, batch_size=None):  # what the request planned, recorded
        at_once = real(per_row, rows, device, batch_size)
        plans.append({"rows": rows, "rows_at_once": at_once, "bytes_per_row": per_row,
                      "free_bytes": memory.free_bytes(device),
                      "estimate_bytes": memory.fixed_bytes() + at_once * (per_row or 0)})
        return at_once
    mmspec.api.rows_at_once = rows_at_once
    with tempfile.TemporaryDirectory() as scratch:
        run(1, Path(scratch) / "one", a.device)
        base = torch.cuda.max_memory_allocated() if a.device != "cpu" else peak_rss()
        if a.device != "cpu":
            torch.cuda.reset_peak_memory_stats()
        mmspec.engine._Request.done, ran[:] = one_row, []
        start = time.perf_counter()
        try:
            run(a.num, Path(scratch) / "many", a.device)
        except Enough:
            pass
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() if a.device != "cpu" else peak_rss()
    big = plans[-1]
    added = peak - base if a.device == "cpu" else peak
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    result = {"date": time.strftime("%Y-%m-%d"), "commit": commit.strip(), "device": a.device, "num": a.num,
              "seconds": round(seconds, 1), "batches_run": round(len(ran) / big["rows_at_once"], 2), "plan": big, "baseline_peak_bytes": base,
              "peak_bytes": peak, "added_bytes": added, "within_estimate": added <= big["estimate_bytes"]}
    print(json.dumps(result))
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / f"memory_peak_{a.device}_{a.num}.json").write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()

"""The README's quick start (Python, verbatim) against the CLI doing the same work, while a sibling process keeps
one core busy, as on most laptops.

Each run is a fresh process with an empty window cache and without OMP_NUM_THREADS / MKL_NUM_THREADS, timed whole
(imports, loading, two images, saving). Arms, alternating, `--repeats` times each:
  quick-start  the README's ImagePipeline block, as a user pastes it (the library picks its threads per call)
  cli          mmspec generate image "red heart" --num-outputs 2 --seed 0 (the CLI picks its threads per process)
  torch-threads  (with --torch-threads) the quick start on torch's own thread count (OMP_NUM_THREADS = the cores),
               what the library did before it picked threads per call
The sibling is one Python process spinning on one core.

  python benchmarks/busy_sibling.py [--repeats 3] [--torch-threads] [--out benchmarks/results/busy_sibling]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start() -> str:
    """The README's Python block that runs the ImagePipeline."""
    return next(b for b in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
                if "ImagePipeline" in b)


def commands(folder: Path) -> dict[str, tuple[list[str], dict]]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cli = [sys.executable, "-m", "mmspec.cli", "generate", "image", "red heart", "--num-outputs", "2", "--seed", "0",
           "--out", str(folder / "cli"), "--json"]
    return {"quick-start": ([sys.executable, "-c", quick_start()], env), "cli": (cli, env),
            "torch-threads": ([sys.executable, "-c", quick_start()], {**env, "OMP_NUM_THREADS": str(os.cpu_count())})}


def timed(command: list[str], env: dict, cwd: Path) -> float:
    with tempfile.TemporaryDirectory() as cache:  # a cold window cache
        start = time.perf_counter()
        subprocess.run(command, env={**env, "MMSPEC_WINDOW_CACHE": cache}, cwd=cwd, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - start


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--torch-threads", action="store_true", help="also the quick start on torch's own threads")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "busy_sibling"))
    a = ap.parse_args(argv)
    arms = ["quick-start", "cli"] + ["torch-threads"] * a.torch_threads
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    sibling = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(1.0)
        with tempfile.TemporaryDirectory() as scratch:
            runs = commands(Path(scratch))
            for _ in range(a.repeats):
                for arm in arms:
                    seconds[arm].append(timed(*runs[arm], Path(scratch)))
                    print(f"{arm}: {seconds[arm][-1]:.1f} s", flush=True)
    finally:
        sibling.kill()
        sibling.wait()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    result = {"date": time.strftime("%Y-%m-%d"), "commit": commit.strip(), "cores": os.cpu_count(),
              "seconds": seconds, "median": {arm: statistics.median(s) for arm, s in seconds.items()}}
    result["quick_start_over_cli"] = result["median"]["quick-start"] / result["median"]["cli"]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "busy_sibling.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

"""`mmspec bench video --model FOLDER --videos DIR`: a video continuation model over a folder of clips, each method
against plain AR on the same clip and seed, as SCD reports Cosmos (window 64, `coupled`): steps compression (AR's
forwards over the method's) and latency speed-up (AR's seconds over the method's), per clip and over all clips."""
from __future__ import annotations

from pathlib import Path

from mmspec.bench import run_benchmark

VIDEO_SUFFIXES = (".mp4", ".gif", ".webm", ".mov", ".avi", ".mkv")
DEFAULT_VIDEO_METHODS = ("coupled",)


def video_files(folder: "str | Path") -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"--videos: no folder at {folder}")
    files = sorted(f for f in folder.iterdir() if f.suffix.lower() in VIDEO_SUFFIXES)
    if not files:
        raise ValueError(f"--videos: {folder} holds no video files ({', '.join(VIDEO_SUFFIXES)})")
    return files


def bench_videos(pipeline, videos: list[Path], methods=DEFAULT_VIDEO_METHODS, *, prompt=None, repeats: int = 1,
                 **call) -> dict:
    """Every clip through pipeline(prompt, video=clip, method=m, **call) for AR and each method (mmspec.bench's
    run_benchmark: round-robin, best of `repeats`). -> {"per_video": [{video, rows}], "summary": per method its
    forwards and seconds summed over the clips and their ratios to AR's}."""
    per_video, totals = [], {}
    for video in videos:
        rows = run_benchmark(pipeline, prompt, list(methods), repeats=repeats, video=video, **call)
        for row in rows:
            row.pop("output")
            total = totals.setdefault(row["method"], {"method": row["method"], "nfe": 0.0, "seconds": 0.0,
                                                      "identical_rows": 0, "rows": 0})
            total["nfe"] += row["nfe_per_row"] * row["rows"]
            total["seconds"] += row["seconds"]
            total["identical_rows"] += row["identical_rows"]
            total["rows"] += row["rows"]
        per_video.append({"video": str(video), "results": rows})
    ar = totals["ar"]
    for total in totals.values():
        total["steps_compression"] = ar["nfe"] / total["nfe"]
        total["latency_speedup"] = ar["seconds"] / total["seconds"]
    return {"videos": [str(v) for v in videos], "per_video": per_video, "summary": list(totals.values())}


def format_video_table(result: dict) -> str:
    head = f"{'method':<16}{'forwards':>10}{'seconds':>10}{'steps compression':>19}{'latency speed-up':>18}"
    lines = [f"{len(result['videos'])} videos", head, "-" * len(head)]
    for r in result["summary"]:
        lines.append(f"{r['method']:<16}{r['nfe']:>10.0f}{r['seconds']:>10.2f}{r['steps_compression']:>18.2f}x"
                     f"{r['latency_speedup']:>17.2f}x")
    return "\n".join(lines)

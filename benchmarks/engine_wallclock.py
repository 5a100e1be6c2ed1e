"""Wall-clock of many requests on one engine, on this machine, paired in one process: a render job, and a demo's
visitors arriving at once.

job: a render job of `--outputs` outputs of the bundled model (the kind's prompts in turn, seeds 0..; text: 64 new
tokens after code-text's three prompts of 10, 6 and 7 tokens), batch_size
`--batch`, three ways: the default method (`exact`, window auto or `--window`) on the engine (rows of the next batch join as rows
finish; `IN_FLIGHT` batches called at once), the same in lockstep (one batch at a time, rows joining only before its
first step: the job as it ran before the engine), and `method: ar` (on the engine: plain AR rows join as rows
finish). The default's files must be byte for byte `ar`'s (`exact` draws `ar`'s tokens).

demo: `--visitors` visitors of the image tab at once (gradio_client, one image each, `exact`, distinct seeds) on
the demo as shipped (`--concurrency 8 --slots 16`) and as it was (concurrency 1): each visitor's latency to the
picture (the update that shows it with its stats) and to the end of the event (its plots too), p50 and p95, against
one visitor alone; and the same calls on the demo's engine without the demo. The clients leave files on the server
(gradio_client would fetch every preview picture, each over a new TLS-ready connection: in this process, ~0.1 s of
CPU a picture taken from the server it measures).

calls: `--calls` calls made at once from threads on one pipeline sharing its engines (`share_engines(--slots)`: a
server's workers, the demo's visitors), the kind's prompts in turn, call i one output with seed i, the default method:
seconds until all are answered and each call's latency, against the same calls one after another on the same
pipeline, `--rounds` times alternating; every call's output must be the one it gets alone.

  python -m benchmarks.engine_wallclock [--out FILE.json] job --kind video --outputs 32 --batch 8
  python -m benchmarks.engine_wallclock [--out FILE.json] demo --visitors 8
  python -m benchmarks.engine_wallclock [--out FILE.json] calls --kind text --calls 16 --slots 8
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import yaml

from mmspec.bench import PROMPTS
from mmspec.engine import Engine
from mmspec.render import render_job
from mmspec.render.executors import LocalExecutor


def _job(kind: str, outputs: int, batch: int, method: "str | None", folder: Path, window: "int | None" = None,
         frames: "dict[str, Path] | None" = None) -> Path:
    """The job file; `frames`: each prompt's first frame, given as the items' `image`."""
    prompts = PROMPTS[kind]
    items = [{"prompt": prompts[i % len(prompts)], "seeds": [i]} for i in range(outputs)]
    if frames:
        for item in items:
            item["image"] = str(frames[item["prompt"]])
    defaults = {"method": method} if method is not None else {} if window is None else {"window": window}
    job = {"kind": kind, "batch_size": batch, "defaults": defaults, "items": items}
    path = folder / f"{method or 'default'}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _lockstep(on: bool) -> None:
    """The job as it ran before the engine: one batch at a time, its rows in lockstep."""
    Engine.joins_rows, LocalExecutor.IN_FLIGHT = (False, 1) if on else (True, 3)


def _first_frames(folder: Path) -> "dict[str, Path]":
    """Each video prompt's first frame as a PNG: frame 0 of the bundled model's video for it (seed 0), drawn once by its
    first-frame model, as a job of videos from given pictures would have them."""
    from mmspec import VideoPipeline

    pipe, prompts = VideoPipeline.from_pretrained(), PROMPTS["video"]
    out = pipe(prompts, seed=0, method="exact", progress_bar=False)
    frames = {prompt: folder / f"first-{i}.png" for i, prompt in enumerate(prompts)}
    for video, path in zip(out.videos, frames.values()):
        video[0].save(path)
    return frames


def job(args) -> dict:
    os.environ["MMSPEC_WINDOW_CACHE"] = "off"  # every arm learns its windows from the same cold start
    arms = {"default": (None, False), "default-lockstep": (None, True), "ar": ("ar", False)}
    seconds = {name: [] for name in arms}
    files = {}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        frames = _first_frames(scratch) if args.first_frames == "given" else None
        for r in range(args.rounds):
            for name, (method, lockstep) in arms.items():
                out = scratch / f"{name}-{r}"
                _lockstep(lockstep)
                t0 = time.perf_counter()
                summary = render_job(_job(args.kind, args.outputs, args.batch, method, scratch, args.window, frames),
                                     out, progress=False)
                seconds[name].append(time.perf_counter() - t0)
                assert summary["rendered"] == args.outputs, summary
                # (a file's name ends in a hash of its settings: the method's differs)
                files[name] = {p.name.rsplit("-", 1)[0]: p.read_bytes() for p in out.iterdir()
                               if p.suffix in (".png", ".gif", ".txt")}
                print(name, r, round(seconds[name][-1], 2), flush=True)
        _lockstep(False)
    best = {name: min(s) for name, s in seconds.items()}
    result = {"kind": args.kind, "outputs": args.outputs, "batch_size": args.batch, "rounds": args.rounds,
              "window": args.window or "auto", "first_frames": args.first_frames,
              "seconds": best, "default_vs_ar": best["ar"] / best["default"],
              "lockstep_vs_ar": best["ar"] / best["default-lockstep"],
              "same_bytes_as_ar": files["default"] == files["ar"] == files["default-lockstep"]}
    print(json.dumps(result), flush=True)
    return result


def demo(args) -> dict:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from gradio_client import Client

    from mmspec.demo import build_app, launch

    result = {"visitors": args.visitors, "engine alone": _engine_alone(args.visitors)}
    print("engine alone", json.dumps(result["engine alone"]), flush=True)
    for name, options in (("shipped", {}), ("one at a time", {"concurrency": 1, "slots": 1})):
        app = build_app(**options)
        url = launch(app, block=False)
        try:
            client = Client(url, verbose=False, download_files=False)
            _visit(client, 0)  # warm: the first call's compile and caches
            alone = [_visit(client, 100 + seed) for seed in range(3)]
            clients = [Client(url, verbose=False, download_files=False) for _ in range(args.visitors)]
            latency = [(0.0, 0.0)] * args.visitors

            def visit(i):
                latency[i] = _visit(clients[i], 200 + i)
            threads = [threading.Thread(target=visit, args=(i,)) for i in range(args.visitors)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            app.close()
        result[name] = {what: _latency(statistics.median(a[k] for a in alone), [t[k] for t in latency])
                        for k, what in enumerate(("picture", "end"))}
        print(name, json.dumps(result[name]), flush=True)
    return result


def _engine_alone(visitors: int) -> dict:
    """The same calls on the demo's engine (16 places) without the demo: the pipeline called from threads, no
    previews, plots or HTTP. What the decode alone costs: the floor of the demo's figures."""
    from mmspec import ImagePipeline
    from mmspec.options import SLOTS

    pipe = ImagePipeline.from_pretrained()
    pipe.share_engines(SLOTS)
    call = dict(prompt="red heart", method="exact", num_outputs=1)

    def timed(seed):
        t0 = time.perf_counter()
        pipe(seed=seed, **call)
        return time.perf_counter() - t0
    timed(0)
    one = statistics.median(timed(100 + seed) for seed in range(3))
    latency = [0.0] * visitors

    def visit(i):
        latency[i] = timed(200 + i)
    threads = [threading.Thread(target=visit, args=(i,)) for i in range(visitors)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pipe.engines.close()
    return _latency(one, latency)


def calls(args) -> dict:
    from mmspec.pipelines import load_pipeline

    pipe = load_pipeline(args.kind, window_cache="off")
    prompts = [PROMPTS[args.kind][i % len(PROMPTS[args.kind])] for i in range(args.calls)]
    outputs = [None] * args.calls

    def timed(i):
        t0 = time.perf_counter()
        out = pipe(prompts[i], seed=i)
        outputs[i] = out.texts if args.kind == "text" else [t.tolist() for t in out.tokens]
        return time.perf_counter() - t0
    arms = {"one after another": [], "at once": []}
    latency, alone = [0.0] * args.calls, None
    for r in range(args.rounds):
        pipe.engines = None  # (each call its own engine, one at a time)
        t0 = time.perf_counter()
        one = [timed(i) for i in range(args.calls)]
        arms["one after another"].append(time.perf_counter() - t0)
        alone = list(outputs)
        pipe.share_engines(args.slots)

        def visit(i):
            latency[i] = timed(i)
        threads = [threading.Thread(target=visit, args=(i,)) for i in range(args.calls)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        arms["at once"].append(time.perf_counter() - t0)
        pipe.engines.close()
        print(r, {k: round(v[-1], 2) for k, v in arms.items()}, flush=True)
        assert outputs == alone, "a call's output differs from its output alone"
    best = {k: min(v) for k, v in arms.items()}
    result = {"kind": args.kind, "calls": args.calls, "slots": args.slots, "rounds": args.rounds, "seconds": best,
              "at_once_vs_one_after_another": best["one after another"] / best["at once"],
              "latency": _latency(statistics.median(one), latency), "outputs_as_alone": True}
    print(json.dumps(result), flush=True)
    return result


def _latency(alone: float, times: list[float]) -> dict:
    """p50 and p95 of `times`, and each against one visitor `alone`."""
    times = sorted(times)
    p50, p95 = statistics.median(times), times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    return {"alone": alone, "p50": p50, "p95": p95, "p50_vs_alone": p50 / alone, "p95_vs_alone": p95 / alone}


def _visit(client, seed: int) -> tuple[float, float]:
    """One visitor's image: seconds to the update that shows the picture with its stats, and to the event's end."""
    t0 = time.perf_counter()
    job = client.submit(prompt="red heart", method="exact", num_outputs=1, seed=seed, api_name="/image_generate")
    picture = None
    for update in job:
        if picture is None and "prompt" in (update[1] or {}):
            picture = time.perf_counter() - t0
    job.result()
    return picture, time.perf_counter() - t0


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    j = sub.add_parser("job")
    j.add_argument("--kind", default="video", choices=["image", "video", "text"])
    j.add_argument("--outputs", type=int, default=32)
    j.add_argument("--batch", type=int, default=8)
    j.add_argument("--rounds", type=int, default=2)
    j.add_argument("--window", type=int, help="the default method's window (default: auto)")
    j.add_argument("--first-frames", choices=["drawn", "given"], default="drawn",
                   help="video: drawn by the model's first-frame model in each arm (its method), or given as the items' "
                        "image (one picture per prompt, drawn before the arms)")
    d = sub.add_parser("demo")
    d.add_argument("--visitors", type=int, default=8)
    c = sub.add_parser("calls")
    c.add_argument("--kind", default="text", choices=["image", "video", "text"])
    c.add_argument("--calls", type=int, default=16)
    c.add_argument("--slots", type=int, default=8)
    c.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args(argv)
    result = {"job": job, "demo": demo, "calls": calls}[args.what](args)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()

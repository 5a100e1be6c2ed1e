"""A bounded load test of `mmspec serve` on 127.0.0.1: N requests from C concurrent clients against a server in a
subprocess, some malformed (400), some that leave mid-way (streamed: the client closes after the first event), the
rest answered; 429s retried after Retry-After. Reports p50 / p95 latency, throughput against one request at a time,
the 429s, checks every answered image against the pipeline's own output for its prompt and seed, and the server's
counts against the clients' (nothing lost, nothing answered twice). Then a second server takes load and SIGTERM in
the middle of it: every request it accepted is answered (and checked) or refused with 503, none dropped.

    python -m benchmarks.serve_load [--requests 500] [--clients 32] [--model emoji-image] [--slots 2]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["red heart", "smiling face", "pizza", "rocket"]
MALFORMED = [b'{"prompt": "red heart", "n": 0}', b'{"prompt": "pizza", "colour": "red"}', b'{"prompt": ',
             b'{"prompt": "rocket", "window": 0}']
GONE_EVERY, MALFORMED_EVERY = 20, 25  # a request in 20 leaves mid-way, one in 25 is malformed
MAX_RETRIES = 50  # 429s a client takes before it gives up on a request (counted apart: refused, not lost)


@dataclass
class Tally:
    latencies: list = field(default_factory=list)  # seconds, answered requests (429 waits included)
    answers: dict = field(default_factory=dict)  # request id -> (prompt, seed, b64 PNG)
    # request id -> how it ended: 200, 400, 503, "gone" (left mid-way), "refused" (not accepted: the server no longer
    # listened), "gave up" (429 MAX_RETRIES times), "lost: ..." (accepted, then dropped without an answer)
    status: dict = field(default_factory=dict)
    too_many: int = 0  # 429s received (retried)


def request(i: int) -> tuple[str, "dict | bytes"]:
    """Request i: ("malformed", raw body), ("gone", a streamed body) or ("image", a body); its prompt and seed."""
    if i % MALFORMED_EVERY == MALFORMED_EVERY - 1:
        return "malformed", MALFORMED[i % len(MALFORMED)]
    body = {"prompt": PROMPTS[i % len(PROMPTS)], "seed": i % 25, "size": "auto"}
    return ("gone", {**body, "stream": True}) if i % GONE_EVERY == GONE_EVERY - 1 else ("image", body)


async def one(client: httpx.AsyncClient, url: str, i: int, tally: Tally) -> None:
    kind, body = request(i)
    started = time.perf_counter()
    for _ in range(MAX_RETRIES):
        try:
            if kind == "gone":
                async with client.stream("POST", f"{url}/v1/images/generations", json=body) as r:
                    if r.status_code == 200:
                        async for _line in r.aiter_lines():
                            break  # the first event, then away
                        tally.status[i] = "gone"
                        return
                    status = r.status_code
                    await r.aread()
                    headers = r.headers
            else:
                r = await client.post(f"{url}/v1/images/generations", content=body if kind == "malformed" else None,
                                      json=None if kind == "malformed" else body,
                                      headers={"content-type": "application/json"})
                status, headers = r.status_code, r.headers
        except httpx.ConnectError:  # the server no longer listens: never accepted
            tally.status[i] = "refused"
            return
        except httpx.HTTPError as err:  # accepted, then dropped without an answer
            tally.status[i] = f"lost: {type(err).__name__}"
            return
        if status == 429:
            tally.too_many += 1
            await asyncio.sleep(float(headers.get("retry-after", 1)) * random.uniform(1.0, 1.5))  # (as told, spread)
            continue
        tally.status[i] = status
        if status == 200 and kind == "image":
            tally.latencies.append(time.perf_counter() - started)
            tally.answers[i] = (body["prompt"], body["seed"], r.json()["data"][0]["b64_json"])
        return
    tally.status[i] = "gave up"


async def load(url: str, ids: range, clients: int, tally: Tally, during=None) -> float:
    """Sends requests `ids` from `clients` concurrent clients -> the wall-clock; `during`: a coroutine run beside."""
    queue: asyncio.Queue = asyncio.Queue()
    for i in ids:
        queue.put_nowait(i)

    async def client_loop():
        async with httpx.AsyncClient(timeout=300) as client:
            while not queue.empty():
                await one(client, url, queue.get_nowait(), tally)

    started = time.perf_counter()
    await asyncio.gather(*(client_loop() for _ in range(clients)), *([during] if during is not None else []))
    return time.perf_counter() - started


def start_server(args, drain: float) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MMSPEC_WINDOW_CACHE": args.window_cache}
    process = subprocess.Popen([sys.executable, "-m", "mmspec", "serve", "--model", args.model, "--port", "0",
                                "--slots", str(args.slots), "--max-queue", str(args.max_queue), "--threads",
                                str(args.threads), "--drain", str(drain)], env=env, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if not line.startswith("mmspec serve: "):
        raise RuntimeError(f"the server did not start: {line!r}")
    return process, line.split()[2]


def server_counts(url: str) -> dict:
    samples = dict(line.rsplit(" ", 1) for line in httpx.get(f"{url}/metrics").text.splitlines()
                   if not line.startswith("#"))
    return {k.split('"')[1]: int(float(v)) for k, v in samples.items() if k.startswith("mmspec_requests_total{")}


def check_images(args, answers: dict) -> int:
    """How many answered images differ from the pipeline's own output for their prompt and seed."""
    from mmspec.pipelines import load_pipeline
    from mmspec.serve.media import png
    from mmspec.threads import use_cpu_threads

    use_cpu_threads(args.threads)
    pipe = load_pipeline("image", args.model if Path(args.model).is_dir() else ROOT / "models" / args.model,
                         window_cache="off")
    solo = {key: png(pipe(key[0], seed=key[1]).images[0]) for key in sorted({a[:2] for a in answers.values()})}
    return sum(solo[a[:2]] != a[2] for a in answers.values())


def percentile(values: list, q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else (values or [0.0])[0]


async def main_async(args) -> dict:
    report = {"requests": args.requests, "clients": args.clients, "model": args.model, "slots": args.slots,
              "max_queue": args.max_queue, "threads": args.threads}
    process, url = start_server(args, drain=30)
    try:
        solo = Tally()  # one request at a time: the baseline throughput
        async with httpx.AsyncClient(timeout=300) as client:
            await one(client, url, 0, Tally())  # (warm-up: the first call loads what it needs)
            started = time.perf_counter()
            for i in range(args.baseline):
                await one(client, url, 4 * i, solo)  # (multiples of 4 are never malformed nor leave)
            one_at_a_time = args.baseline / (time.perf_counter() - started)
        before = server_counts(url)
        tally = Tally()
        seconds = await load(url, range(args.requests), args.clients, tally)
        await asyncio.sleep(1.0)  # (the server counts a client gone when it notices)
        after = server_counts(url)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    statuses = list(tally.status.values())
    served = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    answered = statuses.count(200)
    report["load"] = {
        "seconds": round(seconds, 1), "answered": answered, "malformed_400": statuses.count(400),
        "gone_mid_way": statuses.count("gone"), "429_received": tally.too_many,
        "gave_up_after_429s": statuses.count("gave up"),
        "lost": [s for s in statuses if s not in (200, 400, "gone", "gave up")],
        "p50_s": round(percentile(tally.latencies, 50), 3), "p95_s": round(percentile(tally.latencies, 95), 3),
        "throughput_rps": round(answered / seconds, 2), "one_at_a_time_rps": round(one_at_a_time, 2),
        "speedup": round(answered / seconds / one_at_a_time, 2),
        "server_counts": served,
        # every request the clients sent is counted once by the server, as the clients saw it end
        "counts_agree": served.get("ok", 0) == answered and served.get("400", 0) == statuses.count(400)
        and served.get("499", 0) == statuses.count("gone") and served.get("429", 0) == tally.too_many,
    }
    print(json.dumps(report["load"]), flush=True)

    # SIGTERM in the middle of load: every request accepted is answered or refused with 503
    process, url = start_server(args, drain=args.drain)
    term = Tally()

    async def sigterm():
        await asyncio.sleep(args.sigterm_after)
        process.send_signal(signal.SIGTERM)

    try:
        await load(url, range(args.sigterm_requests), args.clients, term, during=sigterm())
        exit_status = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    statuses = list(term.status.values())
    report["sigterm"] = {"requests": args.sigterm_requests, "after_s": args.sigterm_after, "drain_s": args.drain,
                         "answered": statuses.count(200), "refused_503": statuses.count(503),
                         "not_accepted": statuses.count("refused"), "gone_mid_way": statuses.count("gone"),
                         "malformed_400": statuses.count(400), "429_received": term.too_many,
                         "gave_up_after_429s": statuses.count("gave up"),
                         "lost": [s for s in statuses if s not in (200, 503, 400, "refused", "gone", "gave up")],
                         "exit_status": exit_status}
    print(json.dumps(report["sigterm"]), flush=True)
    answers = {**tally.answers, **{("term", k): v for k, v in term.answers.items()}}
    report["images_checked"] = len(answers)
    report["images_differing_from_solo"] = check_images(args, answers)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--model", default="emoji-image", help="an image model folder or a bundled name")
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--max-queue", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="the server's torch threads")
    parser.add_argument("--baseline", type=int, default=20, help="requests one at a time, for the baseline")
    parser.add_argument("--sigterm-requests", type=int, default=100)
    parser.add_argument("--sigterm-after", type=float, default=3.0, help="seconds into the load")
    parser.add_argument("--drain", type=float, default=2.0, help="the second server's --drain: past it, 503s")
    parser.add_argument("--out", help="write the report here as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache:
        args.window_cache = cache
        report = asyncio.run(main_async(args))
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    ok = not report["load"]["lost"] and not report["sigterm"]["lost"] and report["load"]["counts_agree"] \
        and report["images_differing_from_solo"] == 0 and report["sigterm"]["exit_status"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

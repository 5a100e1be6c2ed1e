"""The service over real sockets on 127.0.0.1: OpenAI's own client, concurrent requests, a client that goes away,
a full queue, the drain; and `mmspec serve` in a subprocess drained by SIGTERM."""
import base64
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from mmspec.serve import media

ROOT = Path(__file__).resolve().parents[2]


def metric(url: str, name: str) -> float:
    """A sample of GET /metrics by its name and labels (0 when not there yet)."""
    samples = dict(line.rsplit(" ", 1) for line in httpx.get(f"{url}/metrics").text.splitlines()
                   if not line.startswith("#"))
    return float(samples.get(name, 0))


def wait_for(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_openais_client_generates_the_pipelines_images_and_completions(image_pipe, text_pipe, served):
    openai = pytest.importorskip("openai", reason="the dev extra is not installed: pip install -e '.[dev]'")
    with served(image_pipe, name="tiny-image") as server:
        api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        images = api.images.generate(prompt="red heart", n=2, response_format="b64_json",
                                     extra_body={"seed": 11, "method": "gumbel", "window": 4})
        with pytest.raises(openai.BadRequestError, match="n is 5: this server makes at most 4"):
            api.images.generate(prompt="red heart", n=5)
    solo = image_pipe("red heart", num_outputs=2, seed=11, method="gumbel", window=4)
    assert [d.b64_json for d in images.data] == [media.png(i) for i in solo.images]
    with served(text_pipe, name="tiny-text", api_key="k") as server:
        api = openai.OpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0)
        completion = api.completions.create(model="tiny-text", prompt="a b", max_tokens=5, seed=2)
        streamed = "".join(c.choices[0].text for c in api.completions.create(model="tiny-text", prompt="a b",
                                                                             max_tokens=5, seed=2, stream=True))
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0).models.list()
    assert completion.choices[0].text == streamed == text_pipe("a b", max_new_tokens=5, seed=2).texts[0]


def test_concurrent_requests_each_get_their_solo_output(image_pipe, served):
    seeds = range(8)
    with served(image_pipe, slots=3, max_queue=8) as server:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda s: httpx.post(f"{server.url}/v1/images/generations", timeout=60, json={
                "prompt": "red heart" if s % 2 else "apple", "seed": s, "method": "coupled", "window": 3}), seeds))
    assert [a.status_code for a in answers] == [200] * 8
    solo = [media.png(image_pipe("red heart" if s % 2 else "apple", seed=s, method="coupled", window=3).images[0])
            for s in seeds]
    assert [a.json()["data"][0]["b64_json"] for a in answers] == solo


def test_a_client_that_goes_away_cancels_its_request(image_pipe, served, slow):
    pipe = slow(image_pipe, seconds=0.2)  # 16 forwards of ar: 3 s a request
    body = {"prompt": "red heart", "method": "ar", "window": 1}
    with served(pipe) as server:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.url}/v1/images/generations", json=body, timeout=0.6)
        wait_for(lambda: metric(server.url, 'mmspec_requests_total{outcome="499"}') == 1)
        wait_for(lambda: metric(server.url, "mmspec_slots_busy") == 0, 5)  # stopped well before its 3 s
        with httpx.stream("POST", f"{server.url}/v1/images/generations", json={**body, "stream": True},
                          timeout=30) as r:
            assert next(r.iter_lines()).startswith("data: ")  # a first progress event, then the client leaves
        wait_for(lambda: metric(server.url, 'mmspec_requests_total{outcome="499"}') == 2)
        wait_for(lambda: metric(server.url, "mmspec_slots_busy") == 0, 5)
        assert metric(server.url, "mmspec_tokens_total") == 0  # neither call ran to its end


def test_a_full_queue_answers_429_with_retry_after(image_pipe, served, slow):
    pipe = slow(image_pipe, seconds=0.1)
    body = {"prompt": "red heart", "method": "ar", "window": 1}
    with served(pipe, slots=1, max_queue=1) as server:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(httpx.post, f"{server.url}/v1/images/generations", json=body, timeout=60)
            wait_for(lambda: metric(server.url, "mmspec_slots_busy") == 1)
            second = pool.submit(httpx.post, f"{server.url}/v1/images/generations", json=body, timeout=60)
            wait_for(lambda: metric(server.url, "mmspec_queue_depth") == 1)
            third = httpx.post(f"{server.url}/v1/images/generations", json=body, timeout=60)
            assert third.status_code == 429 and int(third.headers["retry-after"]) >= 1
            assert first.result().status_code == second.result().status_code == 200


def test_a_drain_answers_the_accepted_and_refuses_new_requests_with_503(image_pipe, served, slow):
    pipe = slow(image_pipe, seconds=0.05)
    body = {"prompt": "red heart", "method": "ar", "window": 1}
    with served(pipe, slots=1, max_queue=4) as server:
        with ThreadPoolExecutor(3) as pool:
            accepted = [pool.submit(httpx.post, f"{server.url}/v1/images/generations", json=body, timeout=60)
                        for _ in range(3)]
            wait_for(lambda: metric(server.url, "mmspec_queue_depth") == 2)
            server.drain()
            wait_for(lambda: server.backend.draining)
            refused = httpx.post(f"{server.url}/v1/images/generations", json=body, timeout=60)
            health = httpx.get(f"{server.url}/health")
            assert [a.result().status_code for a in accepted] == [200] * 3
    assert refused.status_code == 503 and "shutting down" in refused.json()["error"]["message"]
    assert health.status_code == 503 and health.json()["status"] == "draining"


def test_mmspec_serve_drains_on_sigterm_and_exits_0(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MMSPEC_WINDOW_CACHE": str(tmp_path)}
    process = subprocess.Popen([sys.executable, "-m", "mmspec", "serve", "--model", "emoji-image", "--port", "0",
                                "--threads", "1", "--slots", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("mmspec serve: http://127.0.0.1:"), line + process.stderr.read()
        url = line.split()[2]
        body = {"prompt": "red heart", "method": "ar", "window": 1, "n": 2}  # 512 forwards: seconds a request
        # (--slots 1: the second request waits in the queue while the first runs)
        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(httpx.post, f"{url}/v1/images/generations", json=body, timeout=120)
            wait_for(lambda: metric(url, "mmspec_slots_busy") == 1, 60)
            waiting = pool.submit(httpx.post, f"{url}/v1/images/generations", json=body, timeout=120)
            wait_for(lambda: metric(url, "mmspec_queue_depth") == 1, 60)
            process.send_signal(signal.SIGTERM)
            wait_for(lambda: httpx.get(f"{url}/health").status_code == 503)
            refused = httpx.post(f"{url}/v1/images/generations", json=body, timeout=60)
            answers = [running.result(), waiting.result()]
        assert refused.status_code == 503
        assert [a.status_code for a in answers] == [200] * 2
        assert answers[0].json()["data"] == answers[1].json()["data"]  # the same request, the same images
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()


def test_a_host_other_machines_reach_needs_a_key(capsys):
    from mmspec.cli import main

    assert main(["serve", "--model", "emoji-image", "--host", "0.0.0.0"]) == 2
    assert "--host 0.0.0.0 is reachable from other machines: give --api-key KEY" in capsys.readouterr().err


def test_a_model_the_service_cannot_run_is_refused_in_one_line_before_it_listens(tmp_path, capsys):
    from mmspec.cli import main
    from tiny import tiny_cosmos_folder

    cosmos = tiny_cosmos_folder(tmp_path / "cosmos")
    assert main(["serve", "--model", str(cosmos), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "mmspec serve --model does not run it (the service takes a prompt and a first frame" in err
    assert len(err.splitlines()) == 1
    assert main(["serve", "--model", "no-such-model"]) == 2
    assert "--model no-such-model: no model folder there, nor a bundled model of that name (code-text" in \
        capsys.readouterr().err

"""`mmspec serve --backend ray`: the same app as 2 Ray Serve replicas on CPU (a local Ray of 2 CPUs), each answering
what the pipeline gives alone. The slowest test of tests/serve (a local Ray starts in tens of seconds)."""
import socket
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from mmspec.serve import media
from mmspec.serve.server import Settings


@pytest.fixture
def ray_serve():
    try:
        import ray
        from ray import serve
    except ImportError as err:  # (ray.serve without its extra's packages raises ModuleNotFoundError: grpc...)
        print(f"skipping the Ray Serve test: {err}")
        pytest.skip(f"Ray Serve cannot start here: {err} (pip install -e '.[serve]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield serve
    serve.shutdown()
    ray.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_replicas_serve_the_app_and_answer_each_requests_solo_output(ray_serve, tiny_models, image_pipe):
    from mmspec.serve.replicas import APP, start

    url = start(Settings(str(tiny_models / "image"), port=free_port(), api_key="k", max_queue=4), replicas=2)
    headers = {"Authorization": "Bearer k"}
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda s: httpx.post(f"{url}/v1/images/generations", headers=headers, timeout=120,
                                                     json={"prompt": "red heart", "seed": s}), range(4)))
    assert [a.status_code for a in answers] == [200] * 4, answers[0].text
    assert [a.json()["data"][0]["b64_json"] for a in answers] == \
        [media.png(image_pipe("red heart", seed=s).images[0]) for s in range(4)]
    assert httpx.get(f"{url}/v1/models").status_code == 401  # the app's key, in every replica
    assert ray_serve.status().applications[APP].deployments[APP].replica_states == {"RUNNING": 2}

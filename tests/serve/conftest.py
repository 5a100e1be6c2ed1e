"""The service on the tiny models: apps under FastAPI's TestClient, and a real uvicorn server on a free port of
127.0.0.1 in a thread (its drain started as SIGTERM starts it)."""
import threading
import time
from contextlib import contextmanager

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed: pip install -e '.[serve]'")

from fastapi.testclient import TestClient  # noqa: E402

from mmspec.pipelines import load_pipeline  # noqa: E402
from mmspec.serve.app import create_app  # noqa: E402


@pytest.fixture(scope="session")
def image_pipe(tiny_models):
    return load_pipeline("image", tiny_models / "image", window_cache="off")


@pytest.fixture(scope="session")
def video_pipe(tiny_models):
    return load_pipeline("video", tiny_models / "video", window_cache="off")


@pytest.fixture(scope="session")
def text_pipe(tiny_text):
    return load_pipeline("text", tiny_text / "target", window_cache="off")


@pytest.fixture(scope="session")
def client():
    return _client


@pytest.fixture(scope="session")
def served():
    return _served


@pytest.fixture(scope="session")
def slow():
    return Slow


@contextmanager
def _client(pipe, name="tiny", **options):
    """A TestClient of the app on `pipe`; its backend's workers stopped after."""
    app = create_app(pipe, name, **options)
    try:
        with TestClient(app) as c:
            yield c
    finally:
        app.state.backend.drain(0)
        app.state.backend.close()


class Slow:
    """A pipeline whose every forward takes at least `seconds`: requests that are still running when a test acts."""

    def __init__(self, pipe, seconds: float = 0.05):
        self._pipe, self._seconds = pipe, seconds
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self._pipe, name)

    def __call__(self, *args, on_commit, **kwargs):
        self.calls += 1

        def hook(state, k):
            time.sleep(self._seconds)
            on_commit(state, k)
        return self._pipe(*args, on_commit=hook, **kwargs)


@contextmanager
def _served(pipe, name="tiny", drain_seconds: float = 30.0, **options):
    """The app served by uvicorn on a free port of 127.0.0.1, in a thread -> the server (its .url)."""
    import uvicorn

    from mmspec.serve.server import DrainingServer

    app = create_app(pipe, name, **options)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = DrainingServer(config, app.state.backend, drain_seconds)
    thread = threading.Thread(target=server.run, daemon=True)  # (not the main thread: no signal handlers)
    thread.start()
    deadline = time.monotonic() + 30
    while server.url is None:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield server
    finally:
        if server.drainer is None:
            server.drain()
        thread.join(timeout=30)
        assert not thread.is_alive(), "the server did not stop"

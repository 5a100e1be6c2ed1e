"""One demo app on the tiny models, served on a free localhost port for the whole session."""
import os
import socket
from contextlib import contextmanager

import pytest

os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"  # before gradio is imported: no phoning home


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def port() -> int:
    return free_port()


@contextmanager
def served(**models):
    """The app on the given model folders (default: the bundled models), served; yields its URL."""
    from mmspec.demo import build_app, launch

    app = build_app(**models)
    try:
        yield launch(app, port=free_port(), block=False)
    finally:
        app.close()


@pytest.fixture(scope="session")
def serve():
    pytest.importorskip("gradio", reason="the demo extra is not installed: pip install -e '.[demo]'")
    return served


@pytest.fixture(scope="session")
def tiny_demo_models(tiny_heads, tiny_models, tiny_text) -> dict:
    """The image and text models with a draft head (method eagle), the video model without one."""
    return dict(image_model=tiny_heads / "image", video_model=tiny_models / "video",
                text_model=tiny_heads / "text", text_draft=tiny_text / "draft")


@pytest.fixture(scope="session")
def demo_url(serve, tiny_demo_models):
    with serve(**tiny_demo_models) as url:
        yield url


@pytest.fixture(scope="session")
def client(demo_url):
    from gradio_client import Client

    return Client(demo_url, verbose=False)

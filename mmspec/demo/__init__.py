"""The Gradio demo (`mmspec demo`): needs the demo extra, pip install -e ".[demo]"."""
import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # offline: gradio must not phone home

from mmspec.demo.app import build_app, launch  # noqa: E402

__all__ = ["build_app", "launch"]

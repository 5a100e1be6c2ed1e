"""The mmspec Gradio demo: `python demos/app.py [--port P] ...`, the same as `mmspec demo [--port P] ...`.

The app lives in the package (mmspec.demo) so that `mmspec demo` finds it from any install;
`build_app` is re-exported here for scripts that build the app themselves.
"""
import sys

from mmspec.cli import main
from mmspec.demo import build_app

__all__ = ["build_app"]

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))

"""`mmspec demo`: serves on localhost and prints the URL; without gradio, says what to install."""
import subprocess
import sys
import urllib.request

import pytest

from mmspec.cli import main


def test_without_gradio_it_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gradio", None)  # import gradio now raises ImportError
    for name in [m for m in sys.modules if m.startswith("mmspec.demo")]:  # imported by other tests
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(SystemExit) as exit_:
        main(["demo"])
    assert exit_.value.code == 2 and 'needs gradio: pip install -e ".[demo]"' in capsys.readouterr().err


def test_it_serves_on_localhost_and_prints_the_url(serve, tiny_demo_models, port):
    models = [f"--{k.replace('_', '-')}={v}" for k, v in tiny_demo_models.items()]
    proc = subprocess.Popen([sys.executable, "-m", "mmspec.cli", "demo", "--port", str(port), *models],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = next(line for line in proc.stdout if "running on" in line)
        assert line.strip().endswith(f"http://127.0.0.1:{port}/")
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30).read().decode()
        assert "mmspec demo" in page
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_ctrl_c_stops_the_served_demo_with_one_line(tiny_demo_models, port, tmp_path):
    from interrupting import Command

    models = [f"--{k.replace('_', '-')}={v}" for k, v in tiny_demo_models.items()]
    Command(["demo", "--port", port, *models], tmp_path).when(lambda c: b"running on" in c.out).interrupt()

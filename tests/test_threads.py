import pytest
import torch

from mmspec import threads
from mmspec.cli import main


@pytest.fixture
def machine(monkeypatch):
    """A machine of 8 cores where torch would run 8 threads; set `busy` to the cores other work holds."""
    state = {"busy": 0.0}
    monkeypatch.setattr(threads, "cores", lambda: 8)
    monkeypatch.setattr(threads, "busy_cores", lambda: state["busy"])
    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    return state


def test_threads_are_torch_s_on_an_idle_machine_and_only_the_free_cores_on_a_busy_one(machine):
    assert threads.cpu_threads() == 8
    machine["busy"] = 2.2
    assert threads.cpu_threads() == 6
    machine["busy"] = 7.6  # (less than half a core free still runs one thread)
    assert threads.cpu_threads() == 1
    machine["busy"] = 30.0
    assert threads.cpu_threads() == 1


def test_asked_threads_and_the_environment_s_win_over_the_load(machine, monkeypatch):
    machine["busy"] = 7.0
    assert threads.cpu_threads(3) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert threads.cpu_threads() == 8
    with pytest.raises(ValueError, match="--threads must be >= 1"):
        threads.cpu_threads(0)


def test_busy_cores_reads_this_machine():
    busy = threads.busy_cores()
    assert 0.0 <= busy < 10 * threads.cores()


def test_generate_runs_on_the_threads_free_and_says_so(tiny_models, tmp_path, capsys, monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setattr(threads, "cores", lambda: 2)
    monkeypatch.setattr(threads, "busy_cores", lambda: 1.0)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    chosen = []
    monkeypatch.setattr(torch, "set_num_threads", chosen.append)
    try:
        argv = ["generate", "image", "red heart", "--model", str(tiny_models / "image"), "--out", str(tmp_path)]
        assert main([*argv, "--json"]) == 0
        assert chosen == [1] and "1 CPU thread(s) of 2" in capsys.readouterr().err
        assert main([*argv, "--json", "--threads", "2"]) == 0
        assert chosen[-1] == 2 and "CPU thread" not in capsys.readouterr().err
        assert main([*argv, "--threads", "0"]) == 2 and "--threads must be >= 1" in capsys.readouterr().err
    finally:
        monkeypatch.undo()
        assert torch.get_num_threads() == before

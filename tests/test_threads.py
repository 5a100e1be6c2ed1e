import pytest
import torch

import mmspec
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


@pytest.fixture
def library(monkeypatch):
    """A process where nothing chose threads yet (no CLI, no environment), where the CLI's choice would be 7 threads
    when other work is `busy`, 8 otherwise."""
    state = {"busy": 0.0}
    before = torch.get_num_threads()
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "_TORCH_DEFAULT", before)
    monkeypatch.setattr(threads, "_scope", {**threads._scope, "process": False, "at": -threads._CACHE_SECONDS})
    monkeypatch.setattr(threads, "cpu_threads", lambda requested=None: requested or (7 if state["busy"] else 8))
    yield state
    torch.set_num_threads(before)


def _threads_inside(**kw) -> list[int]:
    from tiny import tiny_gpt

    seen = []
    mmspec.generate(mmspec.ReferenceTarget(tiny_gpt()), torch.tensor([0]), mmspec.Grid2D(2, 2), window=2,
                    on_commit=lambda state, k: seen.append(torch.get_num_threads()), **kw)
    return seen


def test_a_library_call_runs_on_the_free_cores_and_gives_the_caller_s_threads_back(library):
    before = torch.get_num_threads()
    library["busy"] = 1.0
    assert set(_threads_inside()) == {7} and torch.get_num_threads() == before


def test_a_caller_who_chose_threads_keeps_them(library, monkeypatch):
    library["busy"] = 1.0
    torch.set_num_threads(3)
    assert set(_threads_inside()) == {3} and torch.get_num_threads() == 3
    torch.set_num_threads(threads._TORCH_DEFAULT)
    monkeypatch.setenv("OMP_NUM_THREADS", str(threads._TORCH_DEFAULT))
    assert set(_threads_inside()) == {threads._TORCH_DEFAULT}


def test_the_cli_s_choice_holds_in_its_library_calls(library):
    threads.use_cpu_threads(2)
    library["busy"] = 1.0
    assert set(_threads_inside()) == {2}


def test_nested_and_failing_calls_restore_the_caller_s_threads(library):
    before = torch.get_num_threads()
    library["busy"] = 1.0
    with threads.call_threads():
        assert torch.get_num_threads() == 7
        assert set(_threads_inside()) == {7}  # (the inner call neither measures again nor restores)
        assert torch.get_num_threads() == 7
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError):
        _threads_inside(num_samples=0)
    assert torch.get_num_threads() == before
    with threads.call_threads("meta"):  # an accelerator: torch's threads
        assert torch.get_num_threads() == before


def test_a_pipeline_loads_and_runs_on_the_free_cores(library, tiny_models):
    from mmspec.pipelines import ImagePipeline

    before = torch.get_num_threads()
    library["busy"] = 1.0
    seen = []
    pipe = ImagePipeline.from_pretrained(tiny_models / "image", window_cache="off")
    pipe("red heart", on_commit=lambda state, k: seen.append(torch.get_num_threads()))
    assert set(seen) == {7} and torch.get_num_threads() == before

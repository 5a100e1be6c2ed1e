"""The families' real sizes with random weights (mmspec.synthetic), and the benchmarks that run them: cost curves,
the projection of the papers' acceptance, LlamaGen's own loop and the GPU script's rehearsal."""
import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

import mmspec
from benchmarks import cost_curve, llamagen_loop, projection
from mmspec.synthetic import REAL, _module, build, scaled

ROOT = Path(__file__).resolve().parents[1]

# parameters of the released models (their cards; LlamaGen's table; mmspec's Cosmos doc), in billions, 1% apart at most
RELEASED = {"llamagen-gpt-b": 0.111, "llamagen-gpt-l": 0.343, "llamagen-gpt-xl": 0.775, "llamagen-gpt-xxl": 1.4,
            "lumina-mgpt-7b": 7.0, "emu3-gen": 8.49, "cosmos-1-4b": 4.0, "cosmos-1-5b-video2world": 4.58,
            "llama-3-8b": 8.03}


@pytest.mark.parametrize("name", sorted(RELEASED))
def test_real_shapes_have_the_released_sizes(name):
    with torch.device("meta"):  # no memory: the shapes only
        model = _module(REAL[name])
    billions = sum(p.numel() for n, p in model.named_parameters() if "vqmodel" not in n) / 1e9
    assert billions == pytest.approx(RELEASED[name], rel=0.01)


@pytest.mark.parametrize("name", sorted(REAL))
def test_tiny_versions_build_and_generate_losslessly(name):
    model = build(scaled(name), dtype=torch.float32, seed=1)
    assert model.params > 0 and next(model.model.parameters()).dtype == torch.float32
    given = None
    if model.condition is None:  # a Cosmos base model continues a video: its first tokens are given
        given = torch.full((1, model.layout.length), -1)
        given[0, :3] = 5
    runs = {m: mmspec.generate(model.target, model.condition, model.layout, method=m, window=4,
                               sampling=model.sampling, seed=3, given=given, num_outputs=2) for m in ("ar", "exact")}
    assert torch.equal(runs["ar"].tokens, runs["exact"].tokens)
    assert (runs["ar"].tokens >= 0).all()


def test_build_fills_in_place_on_the_device_in_the_dtype():
    model = build(scaled("llamagen-gpt-b"), dtype=torch.bfloat16)
    weights = model.model.layers[0].attention.wqkv.weight
    assert weights.dtype == torch.bfloat16 and weights.float().std().item() == pytest.approx(0.02, rel=0.1)
    assert (model.model.norm.weight == 1).all()


def test_cost_curve_of_a_tiny_model_and_its_floors():
    device = torch.device("cpu")
    rows = cost_curve.curve("llamagen-gpt-b", [1, 2], [1, 4], device, torch.float32, 1, False, 1e10, 1e11,
                            scaled("llamagen-gpt-b"))
    assert [(r["rows"], r["window"]) for r in rows] == [(1, 1), (1, 4), (2, 1), (2, 4)]
    assert all(r["eager_ms"] > 0 for r in rows)
    memory = {(r["rows"], r["window"]): r["memory_floor_ms"] for r in rows}
    compute = {(r["rows"], r["window"]): r["compute_floor_ms"] for r in rows}
    assert memory[(2, 1)] > memory[(1, 1)] and compute[(1, 4)] > 3 * compute[(1, 1)]
    table = cost_curve.table(rows)
    assert table.count("\n") == 5 and "| llamagen-gpt-b | 2 | 4 |" in table


def test_cost_curve_command_writes_as_it_goes(tmp_path):
    cost_curve.main(["cosmos-1-4b", "llama-3-8b", "--scaled", "--rows", "1", "--windows", "1,4", "--repeats", "1",
                     "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "cost_curve.json").read_text())
    assert {r["model"] for r in saved["rows"]} == {"cosmos-1-4b", "llama-3-8b"} and saved["environment"]["scaled"]


def test_projection_divides_the_nfe_ratio_by_the_cost_ratio():
    curve = {"environment": {"device": "cpu", "threads": 2}, "rows": [
        {"model": "lumina-mgpt-7b", "rows": 2, "window": 1, "eager_ms": 10.0},
        {"model": "lumina-mgpt-7b", "rows": 2, "window": 64, "eager_ms": 25.0},
        {"model": "llamagen-gpt-b", "rows": 2, "window": 1, "eager_ms": 4.0},
        {"model": "llamagen-gpt-b", "rows": 2, "window": 64, "eager_ms": 16.0}]}
    rows = {(r["paper"], r["curve"]): r for r in projection.project([curve])}
    own = rows[("SJD-PAC, Lumina-mGPT 7B", "lumina-mgpt-7b")]
    assert own["own_family"] and own["cost_ratio"] == 2.5 and own["projected_latency"] == pytest.approx(4.51 / 2.5,
                                                                                                       abs=0.01)
    assert own["paper_latency"] == 3.80
    stand_in = rows[("SJD-PAC, Lumina-mGPT 7B", "llamagen-gpt-b")]
    assert not stand_in["own_family"] and stand_in["projected_latency"] == pytest.approx(4.51 / 4, abs=0.01)
    assert not any(r["window"] == 128 for r in rows.values())  # no curve at Cosmos's window: no projection
    assert "(stand-in)" in projection.table(list(rows.values()))


def test_llamagen_loop_refuses_in_one_line_without_a_checkout(tmp_path, monkeypatch):
    monkeypatch.delenv(llamagen_loop.ENV, raising=False)
    for argv in ([], ["--llamagen", str(tmp_path)]):
        with pytest.raises(SystemExit) as err:
            llamagen_loop.main(argv)
        assert "\n" not in str(err.value) and "LlamaGen" in str(err.value)


def test_llamagen_loop_without_a_checkout_times_mmspecs_ar_against_the_default(capsys):
    llamagen_loop.main(["--mmspec-only", "--scaled", "--rows", "2", "--repeats", "1"])
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["same_tokens"] and "llamagen_s_per_image" not in row and row["default_vs_ar_cpu"] > 0


@pytest.mark.skipif(not os.environ.get(llamagen_loop.ENV), reason=f"{llamagen_loop.ENV}=DIR names a LlamaGen checkout")
def test_llamagen_loop_on_a_tiny_gpt():
    rows = llamagen_loop.measure(Path(os.environ[llamagen_loop.ENV]), "llamagen-gpt-b", [2], 1,
                                 scaled("llamagen-gpt-b"))
    assert rows[0]["same_tokens"] and rows[0]["llamagen_s_per_image"] > 0


def test_gpu_script_runs_its_steps_in_priority_order_within_its_budget(tmp_path):
    """With no budget left every step is announced and skipped, in the script's order (the full rehearsal,
    `bash benchmarks/gpu.sh --dry-run`, runs them all on the CPU in minutes)."""
    out = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu.sh"), "--dry-run", str(tmp_path)],
                         env={**os.environ, "BUDGET": "0"}, capture_output=True, text=True, timeout=60)
    steps = [line.split()[1].rstrip(":") for line in out.stdout.splitlines() if line.startswith("== ")][:-1]
    assert out.returncode == 0, out.stderr
    assert steps[:4] == ["cuda-tests", "cosmos-cuda-tests", "compile-image", "compile-video"]
    assert steps.index("curve-lumina") < steps.index("curve-lumina-compiled") < steps.index("curve-llamagen")
    assert all("skipped" in line for line in out.stdout.splitlines()[:-1])

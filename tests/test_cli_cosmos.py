"""The command line on a Cosmos folder: generate video --video, bench --videos, convert cosmos, its one-line errors."""
import json
import shutil

import imageio.v3 as iio
import pytest

from mmspec.cli import main
from tiny import clip, tiny_cosmos_folder


@pytest.fixture(scope="module")
def cosmos(tmp_path_factory):
    root = tmp_path_factory.mktemp("cosmos-cli")
    folder = tiny_cosmos_folder(root / "base")
    videos = root / "videos"
    videos.mkdir()
    for seed in range(2):
        iio.imwrite(videos / f"clip{seed}.mp4", clip(4, seed=seed).numpy(), fps=8)
    iio.imwrite(root / "five.mp4", clip(5).numpy(), fps=8)
    return folder, videos, root


def test_generate_video_continues_a_4_frame_mp4(cosmos, tmp_path, capsys):
    folder, videos, _ = cosmos
    assert main(["generate", "video", "--model", str(folder), "--video", str(videos / "clip0.mp4"),
                 "--allow-torchscript", "--out", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert sorted(p.rsplit(".", 1)[1] for p in result["outputs"]) == ["gif", "mp4"]
    assert iio.imread(result["outputs"][1]).shape[:3] == (7, 16, 16)  # 1 + 3 + 3 frames of the latent grid


def test_bench_videos_reports_steps_compression_and_latency_against_ar(cosmos, tmp_path, capsys):
    folder, videos, _ = cosmos
    out = tmp_path / "bench.json"
    assert main(["bench", "--model", str(folder), "--videos", str(videos), "--allow-torchscript",
                 "--out", str(out)]) == 0  # (the kind is video)
    result = json.loads(out.read_text())
    summary = {r["method"]: r for r in result["summary"]}
    assert result["window"] == 64 and list(summary) == ["ar", "coupled"] and len(result["per_video"]) == 2
    assert summary["ar"]["steps_compression"] == 1.0 and summary["coupled"]["steps_compression"] >= 1.0
    assert "steps compression" in capsys.readouterr().out


def _error(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_one_line_errors(cosmos, tmp_path, capsys):
    folder, videos, root = cosmos
    run = ["generate", "video", "--model", str(folder), "--out", str(tmp_path), "--video"]
    assert "--allow-torchscript" in _error(run + [str(videos / "clip0.mp4")], capsys)
    assert "has 5 frames of 16x16; this model's tokenizer takes 1 or 4 RGB frames of 16x16" in _error(
        run + [str(root / "five.mp4"), "--allow-torchscript"], capsys)
    bare = tmp_path / "no-tokenizer"
    shutil.copytree(folder, bare)
    shutil.rmtree(bare / "tokenizer")
    assert "no Cosmos video tokenizer at" in _error(["generate", "video", "--model", str(bare), "--video",
                                                     str(videos / "clip0.mp4"), "--allow-torchscript"], capsys)
    (tmp_path / "model.pt").write_bytes(b"not read")
    assert "is a pickle; pass --allow-pickle" in _error(["convert", "cosmos", str(tmp_path / "model.pt"),
                                                         str(tmp_path / "out")], capsys)
    assert "Cosmos-1 autoregressive model: no image (it takes video)" in _error(
        ["generate", "video", "--model", str(folder), "--image", str(videos / "clip0.mp4")], capsys)
    assert "the model is a reference GPT (mmspec's own: the bundled emoji models) model: no video (it takes image, mask)" in _error(
        ["generate", "image", "x", "--video", str(videos / "clip0.mp4")], capsys)


def test_a_cosmos_folder_is_benchmarked_over_clips(cosmos, capsys):
    folder, _, _ = cosmos
    assert "benchmarked over clips: mmspec bench video --model FOLDER --videos DIR" in _error(
        ["bench", "video", "--model", str(folder), "--allow-torchscript"], capsys)


def test_cfg_is_refused_before_any_work(cosmos, tmp_path, capsys, monkeypatch):
    """Cosmos has no null condition: --cfg-scale is refused before the model loads, and a pipeline's call refuses
    it before the video is read or encoded."""
    import mmspec.pipelines.cosmos as cosmos_pipeline
    from mmspec.pipelines import VideoPipeline

    folder, videos, _ = cosmos
    pipe = VideoPipeline.from_pretrained(folder, window_cache="off", allow_torchscript=True)

    def no_work(*args, **kwargs):
        raise AssertionError("work done before the refusal")

    monkeypatch.setattr(cosmos_pipeline, "load_cosmos", no_work)
    monkeypatch.setattr(cosmos_pipeline, "read_video", no_work)
    assert "cannot run CFG" in _error(["generate", "video", "--model", str(folder), "--video",
                                       str(videos / "clip0.mp4"), "--allow-torchscript", "--cfg-scale", "3",
                                       "--out", str(tmp_path)], capsys)
    with pytest.raises(ValueError, match="cannot run CFG"):
        pipe(video=videos / "clip0.mp4", sampling={"cfg_scale": 3.0})


def test_a_video2world_folder_is_benchmarked_with_its_text_features(cosmos, tmp_path, capsys):
    """docs/cosmos.md's command: bench video --model V2W --videos DIR --prompt features.safetensors."""
    import torch
    from safetensors.torch import save_file

    _, videos, root = cosmos
    folder = tiny_cosmos_folder(tmp_path / "v2w", video2world=True)
    save_file({"context": torch.randn(5, 12, generator=torch.Generator().manual_seed(0))},
              str(tmp_path / "features.safetensors"))
    out = tmp_path / "bench.json"
    assert main(["bench", "video", "--model", str(folder), "--videos", str(videos), "--prompt",
                 str(tmp_path / "features.safetensors"), "--allow-torchscript", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert len(result["per_video"]) == 2 and {r["method"] for r in result["summary"]} == {"ar", "coupled"}

"""The bundled models work out of the box, offline, and speculation keeps their outputs exact."""
import json

import torch

from mmspec.cli import main
from mmspec.pipelines import ImagePipeline, TextPipeline, VideoPipeline


def test_image_exact_gives_the_same_pixels_as_ar():
    pipe = ImagePipeline.from_pretrained()
    ar = pipe("red heart", num_outputs=2, seed=5, method="ar")
    exact = pipe("red heart", num_outputs=2, seed=5, method="exact", window=16)
    assert torch.equal(ar.tokens, exact.tokens)
    assert [a.tobytes() for a in ar.images] == [b.tobytes() for b in exact.images]
    assert exact.summary["nfe"] < ar.summary["nfe"]
    assert ar.images[0].size == (64, 64)


def test_video_exact_gives_the_same_frames_as_ar():
    pipe = VideoPipeline.from_pretrained()
    ar = pipe("bounce red apple", seed=1, method="ar")
    exact = pipe("bounce red apple", seed=1, method="exact")
    assert exact.stats.window == VideoPipeline.default_window == 64 and exact.summary["window"].startswith("auto, mean ")
    assert torch.equal(ar.tokens, exact.tokens)
    assert len(exact.videos[0]) == 8 and exact.videos[0][0].size == (32, 32)
    assert exact.summary["nfe"] < ar.summary["nfe"]


def test_text_methods_keep_greedy_output_and_exact_keeps_samples():
    pipe = TextPipeline.from_pretrained()
    prompt = "def fibonacci(n):\n"
    greedy = {"temperature": 0}
    ar = pipe(prompt, method="ar", sampling=greedy, max_new_tokens=32)
    for method in ("coupled", "draft-model", "lookup"):
        assert pipe(prompt, method=method, sampling=greedy, max_new_tokens=32).texts == ar.texts
    sampled = pipe(prompt, method="ar", seed=3, max_new_tokens=32, num_outputs=2)
    assert pipe(prompt, method="exact", seed=3, max_new_tokens=32, num_outputs=2, window=6).texts == sampled.texts


def test_cli_generates_a_picture(tmp_path, capsys):
    assert main(["generate", "image", "red heart", "--out", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["outputs"] and (tmp_path / "image_000.png").exists()
    # by default: AR's tokens for the seed (exact), windows picked per step (up to the image default of 16)
    assert result["method"] == "exact" and result["window"] == "auto"
    assert result["stats"]["window"].startswith("auto, mean ")  # the window that ran

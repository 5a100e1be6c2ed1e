import pytest
import torch

from mmspec.pipelines import ImagePipeline, VideoPipeline


def test_image_pipeline_generates_and_saves(tiny_models, tmp_path):
    pipe = ImagePipeline.from_pretrained(tiny_models / "image")
    out = pipe(["red heart", "apple"], num_outputs=2, seed=3, method="coupled", window=5)
    assert len(out.images) == 4 and out.images[0].size == (8, 8)
    assert out.prompts == ["red heart", "red heart", "apple", "apple"]
    assert out.summary["nfe"] >= 1 and out.summary["mean_acceptance_length"] >= 1
    assert [p.name for p in out.save(tmp_path)] == [f"image_{i:03d}.png" for i in range(4)]


def test_exact_gives_the_same_pixels_as_ar(tiny_models):
    pipe = ImagePipeline.from_pretrained(tiny_models / "image")
    ar = pipe("red heart", num_outputs=3, seed=11, method="ar")
    exact = pipe("red heart", num_outputs=3, seed=11, method="exact", window=7)
    assert torch.equal(ar.tokens, exact.tokens)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(ar.images, exact.images))


def test_video_pipeline_saves_gif_and_mp4(tiny_models, tmp_path):
    out = VideoPipeline.from_pretrained(tiny_models / "video")("bounce apple", num_outputs=2, method="gumbel",
                                                               window=4)
    assert len(out.videos) == 2 and len(out.videos[0]) == 3 and out.videos[0][0].size == (4, 4)
    paths = out.save(tmp_path)
    assert sorted(p.suffix for p in paths) == [".gif", ".gif", ".mp4", ".mp4"]
    assert all(p.stat().st_size > 0 for p in paths)


def test_missing_model_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model folder"):
        ImagePipeline.from_pretrained(tmp_path / "nothing")


def test_inpainting_keeps_the_unmasked_tokens_and_regenerates_the_rest(tiny_models):
    import numpy as np

    pipe = ImagePipeline.from_pretrained(tiny_models / "image")
    source = pipe("red heart", seed=3, method="ar")
    h, w, down = pipe.layout.h, pipe.layout.w, pipe.tokenizer.downsample
    mask = np.zeros((h * down, w * down), dtype=np.uint8)
    mask[:down, :] = 255  # regenerate the first row of tokens
    tokens = pipe.tokenizer.encode(source.images[0]).flatten()
    out = pipe("red heart", num_outputs=2, seed=0, method="exact", window=4, image=source, mask=mask)
    assert torch.equal(out.tokens[:, w:], tokens[w:].expand(2, -1))
    ar = pipe("red heart", num_outputs=2, seed=0, method="ar", image=source, mask=mask)
    assert torch.equal(out.tokens, ar.tokens) and out.stats.committed.tolist() == [h * w] * 2
    with pytest.raises(ValueError, match="needs both"):
        pipe("red heart", image=source)


def test_image_to_video_gives_frame_zero(tiny_models, tmp_path):
    image = ImagePipeline.from_pretrained(tiny_models / "image")("red heart", seed=1, method="ar")
    path = tmp_path / "first.png"
    image.images[0].save(path)
    video = VideoPipeline.from_pretrained(tiny_models / "video")
    out = video("bounce apple", num_outputs=2, method="coupled", window=4, image=path)
    first = video._image_tokens(path).flatten()
    frame = video.layout.h * video.layout.w
    assert torch.equal(out.tokens[:, :frame], first.expand(2, -1))
    with pytest.raises(FileNotFoundError, match="no image file"):
        video("bounce apple", image=tmp_path / "none.png")

from concurrent.futures import ThreadPoolExecutor

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


@pytest.mark.parametrize("method", ["exact", "ar"])
def test_calls_made_at_once_share_one_decode_and_get_what_each_gets_alone(tiny_models, method):
    video = VideoPipeline.from_pretrained(tiny_models / "video-from-text")  # (its first frames: an image model's)
    calls = [("bounce apple", 1), ("bounce red heart", 2), ("bounce apple", 3), ("apple", 4), ("red heart", 5)]
    alone = [video(prompt, seed=seed, method=method).tokens for prompt, seed in calls]
    video.share_engines(3)
    with ThreadPoolExecutor(5) as pool:
        together = list(pool.map(lambda call: video(call[0], seed=call[1], method=method).tokens, calls))
    assert all(torch.equal(a, b) for a, b in zip(alone, together))
    engine, = video.engines._engines.values()  # one decode for the calls' one set of options, 3 rows at a time
    assert engine.slots == 3 and video.image_model.engines.slots == 3  # (the first frames' calls share theirs)


def test_video_pipeline_saves_gif_and_mp4(tiny_models, tmp_path):
    out = VideoPipeline.from_pretrained(tiny_models / "video")("bounce apple", num_outputs=2, method="gumbel",
                                                               window=4)
    assert len(out.videos) == 2 and len(out.videos[0]) == 3 and out.videos[0][0].size == (4, 4)
    paths = out.save(tmp_path)
    assert sorted(p.suffix for p in paths) == [".gif", ".gif", ".mp4", ".mp4"]
    assert all(p.stat().st_size > 0 for p in paths)


def test_a_gif_keeps_every_frame_as_its_mp4_does(tmp_path):
    """Repeated frames (a still sprite) are not merged: 8 frames in both files, each frame's pixels as drawn."""
    import imageio.v3 as iio
    import numpy as np
    from PIL import Image

    from mmspec.pipelines.grid import VideoOutput

    still, moved = Image.new("RGB", (4, 4), (200, 30, 30)), Image.new("RGB", (4, 4), (30, 30, 200))
    frames = [still, still, still, moved, moved, still, still, still]
    gif, mp4 = VideoOutput([frames], ["x"], torch.zeros(1, 1), None, scale=4).save(tmp_path)
    shown = iio.imread(gif)
    assert len(shown) == len(list(iio.imiter(mp4))) == 8
    drawn = np.stack([np.asarray(f.resize((16, 16), 0)) for f in frames])
    assert np.abs(shown[..., :3].astype(int) - drawn).max() <= 1  # (one pixel's lowest bit tells repeats apart)
    assert Image.open(gif).n_frames == 8 and Image.open(gif).info["duration"] == 120  # (1000 / 8 ms in centiseconds)


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


def test_inpainting_takes_the_mask_as_a_file(tiny_models, tmp_path):
    from PIL import Image

    pipe = ImagePipeline.from_pretrained(tiny_models / "image")
    source = pipe("red heart", seed=3, method="ar")
    mask = Image.new("L", source.images[0].size)
    mask.paste(255, (0, 0, mask.width, mask.height // 2))
    mask.save(tmp_path / "mask.png")
    from_file = pipe("red heart", seed=0, method="ar", image=source, mask=tmp_path / "mask.png")
    assert torch.equal(from_file.tokens, pipe("red heart", seed=0, method="ar", image=source, mask=mask).tokens)
    with pytest.raises(FileNotFoundError, match="no mask file"):
        pipe("red heart", image=source, mask=tmp_path / "none.png")


def test_image_to_video_gives_frame_zero(tiny_models, tmp_path):
    image = ImagePipeline.from_pretrained(tiny_models / "image")("red heart", seed=1, method="ar")
    path = tmp_path / "first.png"
    image.images[0].save(path)
    video = VideoPipeline.from_pretrained(tiny_models / "video")
    out = video("bounce apple", num_outputs=2, method="coupled", window=4, image=path)
    first = video._image_frame(path)
    frame = video.layout.h * video.layout.w
    assert torch.equal(out.tokens[:, :frame], first.expand(2, -1))
    with pytest.raises(FileNotFoundError, match="no image file"):
        video("bounce apple", image=tmp_path / "none.png")


def test_text_to_image_to_video_stages_the_image_models_picture_as_frame_zero(tiny_models):
    video = VideoPipeline.from_pretrained(tiny_models / "video-from-text")
    rows = ["bounce apple", "bounce apple", "red heart green background", "red heart green background"]
    out = video(["bounce apple", "red heart green background"], num_outputs=2, method="ar", seed=3)
    pictures = video.image_model(["apple", "red heart"], num_outputs=2, seed=3, method="ar")  # (the rows' seeds)
    frames = torch.stack([video._image_frame(video._staged(p, r)) for p, r in zip(pictures.images, rows)])
    assert torch.equal(out.tokens[:, : frames.shape[1]], frames)
    assert out.summary["first_frame"]["nfe"] == pictures.summary["nfe"]  # a plain video's picture is drawn plainly
    exact = video(["bounce apple", "red heart green background"], num_outputs=2, method="exact", window=3, seed=3)
    assert torch.equal(exact.tokens, out.tokens)  # image and video both seed-exact: the whole clip equals ar's
    assert exact.summary["first_frame"]["nfe"] < pictures.summary["nfe"]  # a speculative one's with exact
    at_one = video(["bounce apple", "red heart green background"], num_outputs=2, method="exact", window=1, seed=3)
    assert at_one.summary["first_frame"]["nfe"] == pictures.summary["nfe"]  # window 1 speculates nothing
    coupled = video(["bounce apple", "red heart green background"], num_outputs=2, method="coupled", window=3, seed=3)
    assert torch.equal(coupled.tokens[:, : frames.shape[1]], frames)  # frame 0 is drawn the same for every method
    with pytest.raises(ValueError, match="one per video"):
        video("bounce apple", num_outputs=3, image=pictures)


def test_a_video_model_without_a_first_frame_model_generates_frame_zero_itself(tiny_models):
    video = VideoPipeline.from_pretrained(tiny_models / "video")
    assert video.image_model is None and "first_frame" not in video("bounce apple", method="ar").summary


def test_on_commit_sees_the_committed_prefix_grow_to_the_output(tiny_models):
    """The hook sees the rows still running (`row_ids`: which outputs), each one's prefix growing to its output."""
    pipe = ImagePipeline.from_pretrained(tiny_models / "image")
    seen = {}  # output -> (tokens, n) after each forward it ran in

    def on_commit(rows, k):
        assert rows.seq.shape[0] == len(rows.row_ids) == k.shape[0]
        for i, row in enumerate(rows.row_ids):
            seen.setdefault(row, []).append((rows.seq[i, :rows.length].clone(), int(rows.n[i])))

    out = pipe("red heart", num_outputs=2, method="coupled", window=4, on_commit=on_commit)
    assert sorted(seen) == [0, 1] and max(len(s) for s in seen.values()) == out.summary["nfe"]
    for row, steps in seen.items():
        assert [n for _, n in steps] == sorted(n for _, n in steps)
        tokens, n = steps[-1]
        assert n == 16 and torch.equal(tokens, out.tokens[row])


def test_auto_windows_remember_costs_per_method_across_calls(tiny_models):
    pipe = ImagePipeline.from_pretrained(tiny_models / "image")
    pipe("red heart", num_outputs=2, method="exact")
    pipe("red heart", num_outputs=2, method="coupled", window=4)  # a fixed window learns nothing
    (tokens, _, _, seconds, _, _), = pipe.window_memory["exact"].shapes.values()
    assert set(pipe.window_memory) == {"exact"} and sum(tokens.values()) > 0 and seconds[1]


def test_auto_windows_remember_across_processes_in_the_window_cache(tiny_models, tmp_path, monkeypatch):
    monkeypatch.setenv("MMSPEC_WINDOW_CACHE", str(tmp_path))
    pipe = ImagePipeline.from_pretrained(tiny_models / "image")
    pipe("red heart", num_outputs=2, method="exact")
    file, = tmp_path.glob("image-*/exact-cpu-*threads-v6.json")  # per model folder, method, device and threads
    later = ImagePipeline.from_pretrained(tiny_models / "image")  # a new process: nothing in memory yet
    assert later.window_memory["exact"].shapes == pipe.window_memory["exact"].shapes
    monkeypatch.setenv("MMSPEC_WINDOW_CACHE", "off")
    off = ImagePipeline.from_pretrained(tiny_models / "image")
    off("red heart", num_outputs=2, method="exact")
    assert off.window_memory.folder is None and list(tmp_path.rglob("*.json")) == [file]


def test_the_window_cache_is_given_where_it_is_used(tiny_models, tmp_path, monkeypatch):
    from mmspec.pipelines import load_pipeline
    from mmspec.window import WindowCache

    monkeypatch.setenv("MMSPEC_WINDOW_CACHE", str(tmp_path / "env"))  # the user's default
    assert load_pipeline("image", tiny_models / "image").window_memory.folder.parent == tmp_path / "env"
    assert load_pipeline("image", tiny_models / "image", window_cache="off").window_memory.folder is None
    mine = load_pipeline("image", tiny_models / "image", window_cache=tmp_path / "mine")
    assert mine.window_memory.folder.parent == tmp_path / "mine"
    video = load_pipeline("video", tiny_models / "video-from-text", window_cache=WindowCache(tmp_path / "mine"))
    assert video.image_model.window_memory.folder.parent == tmp_path / "mine"  # its first-frame model's too


def test_a_video_model_without_staging_starts_from_the_image_models_picture_as_it_is(tiny_models, tmp_path):
    import json
    import shutil

    folder = tmp_path / "video"
    shutil.copytree(tiny_models / "video-from-text", folder)
    config = json.loads((folder / "config.json").read_text())
    del config["first_frame_staging"]
    (folder / "config.json").write_text(json.dumps({**config, "tokenizer": str(tiny_models / "vq"),
                                                    "first_frame_model": str(tiny_models / "image")}))
    video = VideoPipeline.from_pretrained(folder)
    out = video("red heart", method="ar", seed=3)
    picture = video.image_model("red heart", seed=3, method="ar")  # the whole prompt, not a parsed subject
    assert video.staging is None
    assert torch.equal(out.tokens[0, : video.layout.h * video.layout.w], video._image_frame(picture.images[0]))


def test_the_summary_reports_the_window_that_ran(tiny_models):
    pipe = ImagePipeline.from_pretrained(tiny_models / "image")
    auto = pipe("red heart", num_outputs=2)  # exact with auto by default
    mean = 1 + auto.stats.forwards_at.sum().item() / auto.stats.nfe.sum().item()
    assert auto.summary["window"] == f"auto, mean {mean:.1f}" and auto.stats.window == pipe.default_window
    assert pipe("red heart", window=4).summary["window"] == 4
    assert pipe("red heart", method="ar").summary["window"] == 1


def test_compile_reaches_the_engine_from_the_pipeline_and_from_each_call(tiny_models, monkeypatch):
    import mmspec.executor

    compiled = []
    real = mmspec.executor.torch.compile
    monkeypatch.setattr(mmspec.executor.torch, "compile",
                        lambda fn, **kw: compiled.append(kw) or real(fn, **{**kw, "backend": "eager"}))
    eager = ImagePipeline.from_pretrained(tiny_models / "image")("red heart", seed=2, method="exact", window=4)
    pipe = ImagePipeline.from_pretrained(tiny_models / "image", compile=True)
    out = pipe("red heart", seed=2, method="exact", window=4)
    assert compiled and compiled[0]["fullgraph"] and torch.equal(out.tokens, eager.tokens)
    compiled.clear()
    pipe("red heart", seed=2, method="exact", window=4, compile=False)  # a call overrides the pipeline's default
    assert not compiled


def test_a_video_s_rows_are_checked_with_its_first_frames_call(tiny_models, monkeypatch):
    from mmspec import memory
    from mmspec.api import row_need

    pipe = VideoPipeline.from_pretrained(tiny_models / "video-from-text", window_cache="off")
    given = torch.full((1, pipe.layout.length), -1)
    given[0, :4] = 0  # frame 0, from the first-frame model
    need = row_need(pipe.target, pipe.condition(["red heart"]), pipe.layout, method="exact", window=4,
                    sampling=pipe.default_sampling, given=given)
    free = int((memory.fixed_bytes() + 2 * need) / memory.SHARE) + 1  # 2 of the video's rows
    monkeypatch.setattr(memory, "free_bytes", lambda device: free)
    pipe.check_rows(["red heart"], 2, method="ar", window=1)  # frame 0 by plain ar: narrower than the video's rows
    with pytest.raises(memory.DoesNotFit, match="^2 rows at a time need about"):  # by exact with auto windows up to
        pipe.check_rows(["red heart"], 2, method="exact", window=4)  # the image model's 16 over its 4 x 4 grid


@pytest.mark.parametrize("method, window, first_frames_fit", [("ar", 1, True), ("exact", 4, False)])
def test_a_video_that_does_not_fit_is_refused_before_its_first_frames_and_its_progress_bar(
        tiny_models, monkeypatch, capsys, method, window, first_frames_fit):
    from mmspec import memory
    from mmspec.api import row_need

    pipe = VideoPipeline.from_pretrained(tiny_models / "video-from-text", window_cache="off")
    image = pipe.image_model
    given = torch.full((1, pipe.layout.length), -1)
    given[0, :4] = 0  # frame 0, from the first-frame model
    need = row_need(pipe.target, pipe.condition(["red heart"]), pipe.layout, method=method, window=window,
                    sampling=pipe.default_sampling, given=given)
    first = row_need(image.target, image.condition(["red heart"]), image.layout, method=method,
                     window=1 if method == "ar" else "auto", sampling=image.default_sampling)  # as the video draws them
    assert (first < need) == first_frames_fit  # 3 rows of one of the two calls fit, of the other not
    free = int((memory.fixed_bytes() + 3 * min(need, first)) / memory.SHARE) + 1
    monkeypatch.setattr(memory, "free_bytes", lambda device: free)
    for model in (pipe, image):
        monkeypatch.setattr(model.target, "session", None)  # any work would fail
    with pytest.raises(memory.DoesNotFit, match="^3 rows at a time need about"):
        pipe("red heart", num_outputs=3, method=method, window=window, batch_size=3, progress_bar=True)
    assert capsys.readouterr().err == ""  # (tqdm writes on stderr)

"""The demo's endpoints through gradio_client, against the app served on localhost (tiny models)."""
from pathlib import Path

import pytest
from PIL import Image

STATS = {"nfe", "mean_acceptance_length", "acceptance_rate", "seconds", "tokens_per_second"}


def _image(path) -> Image.Image:
    assert Path(path).stat().st_size > 0
    return Image.open(path)


def test_image_streams_partial_grids_then_media_and_stats_then_commit_map(client):
    job = client.submit(prompt="red heart", method="coupled", window=5, num_outputs=2, seed=3,
                        api_name="/image_generate")
    gallery, stats, commit_map, histogram = job.result(timeout=120)
    assert len(gallery) == 2 and _image(gallery[0]["image"]).size == (256, 256)  # 8x8 pixels, enlarged
    assert STATS <= set(stats) and stats["outputs"] == 2 and stats["tokens"] == 2 * 16
    assert _image(commit_map).width > 100 and _image(histogram).width > 100
    assert len(job.outputs()) >= 2  # at least one partial grid before the final result
    first = next(i for i, o in enumerate(job.outputs()) if "prompt" in (o[1] or {}))  # the picture and its stats ...
    assert job.outputs()[first][0] == gallery and not isinstance(job.outputs()[first][2], str)  # ... before the plots


def test_video_returns_frames_gif_mp4_and_stats(client):
    gallery, frames, mp4, stats, commit_map, _ = client.predict(prompt="bounce apple", method="exact", window=3,
                                                                num_outputs=2, api_name="/video_generate")
    assert [Path(g["image"]).suffix for g in gallery] == [".gif"] * 2 and _image(gallery[0]["image"]).n_frames == 3
    assert _image(frames).size == (3 * 96, 2 * 96 + 4)  # a row of 3 frames per output
    assert Path(mp4).suffix == ".mp4" and Path(mp4).stat().st_size > 0
    assert STATS <= set(stats) and stats["tokens"] == 2 * 12 and _image(commit_map)


def test_text_returns_the_completion_its_runs_and_stats(client):
    text, runs, stats, commit_map, _ = client.predict(prompt="<s> w3", method="draft-model", window=4,
                                                      max_new_tokens=8, api_name="/text_generate")
    assert text.startswith("<s> w3") and len(text) > len("<s> w3")
    assert "".join(piece["token"] for piece in runs) == text  # the same text, cut where each forward began
    assert sum(int(p["class_or_confidence"].split()[0]) for p in runs[1:]) == stats["tokens"]
    assert STATS <= set(stats) and stats["method"] == "draft-model" and _image(commit_map)


def test_eagle_is_offered_where_the_model_folder_has_a_head(client):
    from gradio_client.exceptions import AppError

    gallery, stats, *_ = client.predict(prompt="red heart", method="eagle", window=4, num_outputs=2,
                                        api_name="/image_generate")
    assert len(gallery) == 2 and stats["method"] == "eagle" and stats["tokens"] == 2 * 16
    text, _, stats, *_ = client.predict(prompt="<s> w3", method="eagle", window=3, max_new_tokens=6,
                                        api_name="/text_generate")
    assert text.startswith("<s> w3") and stats["method"] == "eagle"
    with pytest.raises(AppError, match="eagle.* not in the list of choices"):  # the video model has no head/: not among its methods
        client.predict(prompt="bounce apple", method="eagle", api_name="/video_generate")


@pytest.mark.parametrize("kind, inputs", [("image", dict(prompt="red heart", num_outputs=3)),
                                          ("text", dict(prompt="<s> w3", temperature=1.0, max_new_tokens=12))])
def test_compare_with_ar_states_that_exact_gives_identical_tokens(client, kind, inputs):
    fast, ar, report, verdict = client.predict(method="exact", window=4, seed=5, **inputs,
                                               api_name=f"/{kind}_compare")
    assert report["tokens_identical"] is True and "identical to AR's, token for token" in verdict
    assert report["ar_nfe"] >= report["nfe"] and report["speedup"] > 0
    if kind == "image":
        assert [_image(a["image"]).tobytes() for a in fast] == [_image(b["image"]).tobytes() for b in ar]
    else:
        assert fast == ar


def test_compare_other_methods_does_not_claim_identical_tokens(client):
    *_, report, verdict = client.predict(prompt="red heart", method="coupled", window=4, api_name="/image_compare")
    assert report["tokens_identical"] is None and "by design" in verdict


@pytest.mark.parametrize("endpoint, inputs, message", [
    ("/image_generate", dict(window=300), "maximum value 256"),
    ("/image_generate", dict(num_outputs=9), "maximum value 8"),
    ("/video_compare", dict(window=-1), "minimum value 0"),
    ("/text_generate", dict(prompt="<s> w3", max_new_tokens=128), "context of 128 tokens"),
    ("/image_generate", dict(prompt="  "), "Enter a prompt"),
])
def test_out_of_range_inputs_get_a_message_and_the_app_stays_usable(client, endpoint, inputs, message):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match=message):
        client.predict(**inputs, api_name=endpoint)
    assert client.predict(prompt="red heart", num_outputs=1, api_name="/image_generate")[1]["tokens"] == 16


def test_demos_app_exposes_build_app():
    import importlib.util

    spec = importlib.util.spec_from_file_location("demo_app", Path(__file__).parents[2] / "demos" / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from mmspec.demo import build_app

    assert module.build_app is build_app


def test_the_api_is_generate_and_compare_per_tab(client):
    names = set(client.view_api(print_info=False, return_format="dict")["named_endpoints"])
    assert names == {f"/{kind}_{event}" for kind in ("image", "video", "text") for event in ("generate", "compare")}


@pytest.fixture
def pictures(tmp_path):
    """A picture, a mask of the tiny image model's first token row (8x8 pixels, 4x4 tokens), one that fits no grid."""
    import numpy as np

    paths = {name: tmp_path / f"{name}.png" for name in ("picture", "mask", "odd")}
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(paths["picture"])
    top = np.zeros((8, 8), np.uint8)
    top[:2] = 255
    Image.fromarray(top).save(paths["mask"])
    Image.new("L", (5, 5)).save(paths["odd"])
    return paths


def test_video_starts_from_an_uploaded_first_frame(client, tiny_demo_models, pictures):
    from gradio_client import handle_file

    from mmspec.demo.views import GridView
    from mmspec.pipelines import VideoPipeline

    _, frames, *_ = client.predict(prompt="bounce apple", method="exact", window=3, num_outputs=2, seed=4,
                                   image=handle_file(pictures["picture"]), api_name="/video_generate")
    pipe = VideoPipeline.from_pretrained(tiny_demo_models["video_model"])
    view = GridView(pipe)
    by_hand = pipe("bounce apple", num_outputs=2, seed=4, method="ar", image=pictures["picture"])
    shown = _image(frames).convert("RGB").tobytes()
    assert shown == view.preview(by_hand.tokens, "").tobytes()  # exact == ar, from the same first frame
    assert shown != view.preview(pipe("bounce apple", num_outputs=2, seed=4, method="ar").tokens, "").tobytes()


def test_image_inpaints_an_uploaded_picture_under_a_mask(client, tiny_demo_models, pictures):
    from gradio_client import handle_file

    from mmspec.demo.render import enlarge
    from mmspec.pipelines import ImagePipeline

    gallery, *_ = client.predict(prompt="red heart", method="coupled", window=4, num_outputs=2, seed=1,
                                 image=handle_file(pictures["picture"]), mask=handle_file(pictures["mask"]),
                                 api_name="/image_generate")
    pipe = ImagePipeline.from_pretrained(tiny_demo_models["image_model"])
    by_hand = pipe("red heart", num_outputs=2, seed=1, method="coupled", window=4, image=pictures["picture"],
                   mask=Image.open(pictures["mask"]))
    assert [_image(g["image"]).convert("RGB").tobytes() for g in gallery] == \
        [enlarge(i, 256).tobytes() for i in by_hand.images]


@pytest.mark.parametrize("endpoint, files, message", [
    ("/image_generate", ("mask",), "A mask needs the image to inpaint"),
    ("/image_compare", ("picture",), "Inpainting needs a mask too"),
    ("/image_generate", ("picture", "odd"), "Mask: mask must be [H, W] with H, W multiples of the token grid 4 x 4"),
])
def test_bad_pictures_get_a_message(client, pictures, endpoint, files, message):
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    names = {"picture": "image", "mask": "mask", "odd": "mask"}
    with pytest.raises(AppError) as err:
        client.predict(prompt="red heart", **{names[f]: handle_file(pictures[f]) for f in files}, api_name=endpoint)
    assert message in str(err.value)


def test_outputs_run_in_batches_that_fit_and_one_that_cannot_fit_is_refused_in_one_line(client, tiny_demo_models,
                                                                                       monkeypatch):
    import mmspec.api
    import mmspec.engine
    from gradio_client.exceptions import AppError

    from mmspec import memory
    from mmspec.options import SLOTS
    from mmspec.api import row_need
    from mmspec.pipelines import ImagePipeline

    pipe = ImagePipeline.from_pretrained(tiny_demo_models["image_model"], window_cache="off")
    need = row_need(pipe.target, pipe.condition(["red heart"]), pipe.layout, window=pipe.default_window,
                    sampling=pipe.default_sampling)  # the tab's defaults: exact, auto windows, the model's sampling
    free = int((memory.fixed_bytes() + 2 * need) / memory.SHARE) + 1
    monkeypatch.setattr(memory, "free_bytes", lambda device: free)
    planned = []  # (rows asked, rows at a time) of each generate call

    def rows_at_once(per_row, rows, *args, **kw):
        planned.append((rows, None))
        planned[-1] = (rows, memory.rows_at_once(per_row, rows, *args, **kw))
        return planned[-1][1]
    monkeypatch.setattr(mmspec.api, "rows_at_once", rows_at_once)  # the call's check
    monkeypatch.setattr(mmspec.engine, "rows_at_once", rows_at_once)  # the places of the wave its rows run in
    media, stats, *_ = client.predict(prompt="red heart", num_outputs=5, api_name="/image_generate")
    assert planned == [(5, 2), (SLOTS, 2)] and len(media) == 5 and stats["tokens"] == 5 * 16
    monkeypatch.setattr(memory, "free_bytes", lambda device: memory.fixed_bytes())
    with pytest.raises(AppError, match=r"^1 row at a time needs about .* which holds not even one row: free memory"):
        client.predict(prompt="red heart", num_outputs=1, api_name="/image_generate")
    assert planned == [(5, 2), (SLOTS, 2)]  # refused before any work


def test_a_prompt_the_model_cannot_take_in_whole_is_told_beside_the_output(client, monkeypatch):
    import gradio

    shown = []
    monkeypatch.setattr(gradio, "Warning", shown.append)  # (the app is served in this process)
    gallery, *_ = client.predict(prompt="red elephant", num_outputs=1, api_name="/image_generate")
    assert len(gallery) == 1 and shown == ["the model does not know 'elephant' (it reads them as an unknown word)"]

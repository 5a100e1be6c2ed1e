"""The app through FastAPI's TestClient: each kind's door answers what the pipeline gives alone for the request's
seed, refusals are one line with the right status, streams carry progress and the outputs."""
import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from mmspec.serve import media
from mmspec.serve.schemas import Limits


def png_of(image) -> str:
    return media.png(image)


def events(text: str) -> list:
    return [line[len("data: "):] for line in text.splitlines() if line.startswith("data: ")]


def test_images_equal_the_pipelines_own_output_for_the_seed(image_pipe, client):
    with client(image_pipe, slots=2) as c:
        r = c.post("/v1/images/generations", json={"prompt": "red heart", "n": 2, "seed": 7, "method": "coupled",
                                                   "window": 4, "temperature": 0.8, "top_k": 10})
    assert r.status_code == 200, r.text
    solo = image_pipe("red heart", num_outputs=2, seed=7, method="coupled", window=4,
                      sampling={"temperature": 0.8, "top_k": 10})
    assert [d["b64_json"] for d in r.json()["data"]] == [png_of(i) for i in solo.images]
    assert r.json()["mmspec"]["seeds"] == [7, 8]
    # output j of a prompt is the pipeline's output for seed + j
    assert r.json()["data"][1]["b64_json"] == png_of(image_pipe("red heart", seed=8, method="coupled", window=4,
                                                                 sampling={"temperature": 0.8, "top_k": 10}).images[0])


def test_size_is_the_models_own(image_pipe, client):
    w, h = image_pipe("red heart").images[0].size  # (the tiny model's: 4 x 4 tokens of 2 pixels)
    with client(image_pipe) as c:
        ok = c.post("/v1/images/generations", json={"prompt": "red heart", "size": f"{w}x{h}"})
        wrong = c.post("/v1/images/generations", json={"prompt": "red heart", "size": "1024x1024"})
    assert ok.status_code == 200
    assert Image.open(io.BytesIO(base64.b64decode(ok.json()["data"][0]["b64_json"]))).size == (w, h) == (8, 8)
    assert wrong.status_code == 400 and "this model makes 8x8 images" in wrong.json()["error"]["message"]


def test_inpainting_keeps_the_pixels_outside_the_mask(image_pipe, client):
    picture = image_pipe("red heart", seed=1).images[0]
    mask = np.zeros(picture.size[::-1], np.uint8)
    mask[:4] = 255  # the top half is regenerated
    mask_png = png_of(Image.fromarray(mask))
    with client(image_pipe) as c:
        r = c.post("/v1/images/generations", json={"prompt": "apple", "seed": 3, "image": png_of(picture),
                                                   "mask": mask_png})
        half = c.post("/v1/images/generations", json={"prompt": "apple", "image": png_of(picture)})
        junk = c.post("/v1/images/generations", json={"prompt": "apple", "image": "not base64!", "mask": mask_png})
    assert r.status_code == 200, r.text
    solo = image_pipe("apple", seed=3, image=picture, mask=Image.fromarray(mask))
    assert r.json()["data"][0]["b64_json"] == png_of(solo.images[0])
    assert half.status_code == 400 and "both image and mask" in half.json()["error"]["message"]
    assert junk.status_code == 400 and junk.json()["error"]["message"] == "image must be a base64-encoded PNG or JPEG"


def test_video_is_an_mp4_of_the_pipelines_frames(video_pipe, client):
    with client(video_pipe) as c:
        r = c.post("/v1/videos/generations", json={"prompt": "bounce apple", "seed": 2})
        first_frame = c.post("/v1/videos/generations", json={"prompt": "bounce apple", "seed": 2,
                                                              "image": png_of(Image.new("RGB", (32, 32), "red"))})
    assert r.status_code == 200 and first_frame.status_code == 200
    item = r.json()["data"][0]
    solo = video_pipe("bounce apple", seed=2)
    assert item["mime_type"] == "video/mp4" and item["b64_json"] == media.mp4(solo.videos[0])
    given = video_pipe("bounce apple", seed=2, image=Image.new("RGB", (32, 32), "red"))
    assert first_frame.json()["data"][0]["b64_json"] == media.mp4(given.videos[0])


def test_completions_equal_the_pipelines_texts(text_pipe, client):
    with client(text_pipe) as c:
        r = c.post("/v1/completions", json={"model": "tiny", "prompt": ["a b", "c"], "max_tokens": 6, "n": 2,
                                            "seed": 4, "method": "jacobi", "window": 3})
        other = c.post("/v1/completions", json={"model": "gpt-4", "prompt": "a"})
    assert r.status_code == 200, r.text
    solo = text_pipe(["a b", "c"], num_outputs=2, seed=4, method="jacobi", window=3, max_new_tokens=6)
    body = r.json()
    assert [c["text"] for c in body["choices"]] == solo.texts and body["object"] == "text_completion"
    assert body["usage"]["completion_tokens"] == sum(len(t) for t in solo.tokens)
    assert other.status_code == 404 and "this server runs 'tiny'" in other.json()["error"]["message"]
    with client(text_pipe) as c:
        many = c.post("/v1/completions", json={"prompt": ["a", "b", "c"], "n": 2})
        none = c.post("/v1/completions", json={"prompt": []})
    assert many.status_code == 400
    assert many.json()["error"]["message"].startswith("3 prompts x n 2 ask for 6: this server makes at most 4 outputs")
    assert none.json()["error"]["message"] == "prompt must be a non-empty string or a non-empty list of them"


def test_streamed_completion_chunks_add_up_to_the_text(text_pipe, client):
    with client(text_pipe) as c:
        r = c.post("/v1/completions", json={"prompt": "a b", "max_tokens": 8, "seed": 1, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    items = events(r.text)
    assert items[-1] == "[DONE]"
    chunks = [json.loads(i) for i in items[:-1]]
    assert len({c["id"] for c in chunks}) == 1
    assert "".join(c["choices"][0]["text"] for c in chunks) == text_pipe("a b", max_new_tokens=8, seed=1).texts[0]
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_streamed_image_shows_progress_previews_then_the_images(image_pipe, client):
    with client(image_pipe) as c:
        r = c.post("/v1/images/generations", json={"prompt": "red heart", "n": 2, "seed": 5, "stream": True,
                                                   "partial_images": 2, "window": 1, "method": "ar"})
    items = [json.loads(i) for i in events(r.text)]
    kinds = [i["type"] for i in items]
    progress = [i["committed"] for i in items if i["type"] == "image_generation.progress"]
    assert progress == sorted(progress) and progress[-1] == items[0]["total"] == 2 * image_pipe.layout.length
    assert kinds.count("image_generation.partial_image") == 2 * 2  # 2 previews of 2 rows
    done = [i for i in items if i["type"] == "image_generation.completed"]
    solo = image_pipe("red heart", num_outputs=2, seed=5, method="ar", window=1)
    assert [d["b64_json"] for d in done] == [png_of(i) for i in solo.images] and kinds[-1] == kinds[-2]


@pytest.mark.parametrize("body, message", [
    ({"prompt": "red heart", "n": 9}, "n is 9: this server makes at most 4 outputs a request (--max-n)"),
    ({"prompt": "x" * 2001}, "prompt is 2001 characters: this server takes at most 2000"),
    ({"prompt": "red heart", "n": 0}, "n: Input should be greater than or equal to 1"),
    ({"prompt": "red heart", "nn": 2}, "nn: Extra inputs are not permitted"),
    ({"prompt": "red heart", "method": {"name": "eagle", "head": "/etc"}}, "method: Input should be a valid string"),
    ({"prompt": "red heart", "method": "nope"}, "method 'nope' is not one this server runs: ar, lookup"),
    ({"prompt": "red heart", "window": 0}, "window must be 'auto' or an int in [1, 256], got 0"),
    ({"prompt": "red heart", "top_p": 2}, "top_p: Input should be less than or equal to 1"),
    ({"prompt": "red heart", "response_format": "url"}, "response_format: Input should be 'b64_json'"),
    ({"prompt": "features.safetensors"}, "prompt names a .safetensors file: the server reads no file"),
    ({"prompt": ""}, "prompt: String should have at least 1 character"),
])
def test_a_bad_request_is_refused_in_one_line(image_pipe, client, body, message):
    with client(image_pipe) as c:
        r = c.post("/v1/images/generations", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith(message) and "\n" not in r.json()["error"]["message"]


def test_what_the_pipeline_refuses_is_a_400(text_pipe, client):
    with client(text_pipe) as c:
        r = c.post("/v1/completions", json={"prompt": "a", "method": "eagle"})  # the tiny text model has no head/
    assert r.status_code == 400 and "method 'eagle' is not one this server runs" in r.json()["error"]["message"]


def test_other_kinds_paths_say_which_runs_here_and_models_lists_it(image_pipe, client):
    with client(image_pipe, name="emoji") as c:
        other = c.post("/v1/completions", json={"prompt": "a"})
        listed = c.get("/v1/models").json()["data"]
    assert other.status_code == 404
    assert other.json()["error"]["message"] == \
        "this server runs 'emoji', which makes images: POST /v1/images/generations"
    assert [(m["id"], m["kind"]) for m in listed] == [("emoji", "image")]


def test_the_key_is_needed_everywhere_but_health(image_pipe, client):
    with client(image_pipe, api_key="s3cret") as c:
        assert c.get("/health").status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            r = c.get("/v1/models", headers=headers)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert c.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_a_body_past_the_limit_is_refused_declared_or_chunked(image_pipe, client):
    with client(image_pipe, limits=Limits(max_body_bytes=1000)) as c:
        declared = c.post("/v1/images/generations", json={"prompt": "red heart", "image": "A" * 2000})
        chunked = c.post("/v1/images/generations", content=iter([b'{"prompt": "', b"x" * 1500, b'"}']),
                         headers={"content-type": "application/json"})
        small = c.post("/v1/images/generations", json={"prompt": "red heart"})
    assert declared.status_code == 413 and chunked.status_code == 413, (declared.text, chunked.text)
    assert "larger than this server's 1000 bytes" in chunked.json()["error"]["message"]
    assert small.status_code == 200


def test_metrics_count_requests_forwards_and_tokens(image_pipe, client):
    with client(image_pipe) as c:
        c.post("/v1/images/generations", json={"prompt": "red heart", "method": "ar", "window": 1})
        c.post("/v1/images/generations", json={"prompt": "red heart", "n": 99})
        text = c.get("/metrics").text
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    tokens = image_pipe.layout.length
    assert lines['mmspec_requests_total{outcome="ok"}'] == "1" and lines['mmspec_requests_total{outcome="400"}'] == "1"
    assert lines["mmspec_tokens_total"] == lines["mmspec_forwards_total"] == str(tokens)  # ar: a token a forward
    assert lines["mmspec_queue_depth"] == "0" and lines["mmspec_slots"] == "8"  # as the demo's visitors


def test_a_pipeline_that_shares_engines_is_told_the_slots_and_one_without_runs_as_it_is(image_pipe, client, slow):
    class Sharing(slow):
        def share_engines(self, slots):
            self.shared = slots

    pipe = Sharing(image_pipe, seconds=0)
    with client(pipe, slots=3) as c:
        assert c.get("/health").json()["shared_engines"] is True
        assert c.post("/v1/images/generations", json={"prompt": "red heart"}).status_code == 200
    assert pipe.shared == 3 * 4 and pipe.calls == 1  # every running call's rows (a request's n: up to 4)

    class Alone(slow):
        share_engines = None  # a pipeline that cannot batch calls made at once

    with client(Alone(image_pipe, seconds=0)) as c:
        assert c.get("/health").json()["shared_engines"] is False
        assert c.post("/v1/images/generations", json={"prompt": "red heart"}).status_code == 200

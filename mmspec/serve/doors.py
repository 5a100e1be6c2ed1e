"""A door per kind: how a request becomes a pipeline call, and the call's output an answer, whole or streamed as
server-sent events. The image door is OpenAI's Images API (b64_json), the text door its Completions API; the video
door takes the image door's shape and answers MP4s. A door knows neither methods nor families: the method registry
says which names the pipeline runs, and the pipeline refuses the rest in one line."""
from __future__ import annotations

import time
import uuid
from typing import Iterator

from mmspec.methods import method_names
from mmspec.serve import media
from mmspec.serve.schemas import CompletionRequest, Generation, ImageRequest, VideoRequest
from mmspec.window import MAX_WINDOW

FEATURE_FILES = ".safetensors"  # a prompt some families read as a file of text features: never from a request


class Door:
    """The pipeline of one kind behind its path; `name`: the model's name, as GET /v1/models lists it."""

    kind: str
    path: str
    request: type

    def __init__(self, pipe, name: str):
        self.pipe, self.name = pipe, name
        self.methods = method_names(has_draft_model=getattr(pipe, "draft_model", None) is not None,
                                    has_head=getattr(pipe, "has_head", False))

    def check(self, req: Generation) -> None:
        """Refuses in one line what no call could take, before the request is queued."""
        if req.method not in self.methods:
            raise ValueError(f"method {req.method!r} is not one this server runs: {', '.join(self.methods)}")
        if req.window != "auto" and not 1 <= req.window <= MAX_WINDOW:
            raise ValueError(f"window must be 'auto' or an int in [1, {MAX_WINDOW}], got {req.window}")

    def options(self, req: Generation) -> dict:
        """The pipeline call's keyword arguments every kind shares."""
        return dict(num_outputs=req.n, seed=req.seed, method=req.method, window=req.window, sampling=req.sampling())

    def tokens(self, req: Generation) -> int:
        """Tokens the call commits in all: progress's denominator."""
        layout = getattr(self.pipe, "layout", None)
        return req.n * layout.length if layout is not None else 0


def _check_prompt(prompt: str) -> None:
    if prompt.strip().endswith(FEATURE_FILES):
        raise ValueError(f"prompt names a {FEATURE_FILES} file: the server reads no file a request names; give text")


class ImageDoor(Door):
    kind, path, request = "image", "/v1/images/generations", ImageRequest

    @property
    def size(self) -> "str | None":
        """The model's one image size, "WxH", where the pipeline says it (a grid and a tokenizer's downsample)."""
        layout, tokenizer = getattr(self.pipe, "layout", None), getattr(self.pipe, "tokenizer", None)
        down = getattr(tokenizer, "downsample", None)
        return f"{layout.w * down}x{layout.h * down}" if layout is not None and down else None

    def prepare(self, req: ImageRequest):
        """-> (call(on_commit) -> output, tokens in all, previews)."""
        self.check(req)
        _check_prompt(req.prompt)
        if req.size not in (None, "auto") and req.size != self.size:
            raise ValueError(f"size {req.size!r}: this model makes {self.size or 'one size'} images (or give 'auto')")
        pictures = {}
        if req.image is not None or req.mask is not None:
            if req.image is None or req.mask is None:
                raise ValueError("inpainting takes both image and mask (base64 PNG, the mask nonzero where to "
                                 "regenerate)")
            self.pipe.family.check_inputs(["image", "mask"], self.name)
            pictures = {"image": media.picture(req.image, "image"), "mask": media.picture(req.mask, "mask")}
        options = {**self.options(req), **pictures}
        return (lambda on_commit: self.pipe(req.prompt, on_commit=on_commit, **options)), self.tokens(req), \
            req.partial_images if req.stream else 0

    def answer(self, req: ImageRequest, out) -> dict:
        return {"created": int(time.time()), "data": [{"b64_json": media.png(image), "revised_prompt": req.prompt}
                                                      for image in out.images],
                "mmspec": {"seeds": [req.seed + j for j in range(req.n)], "summary": out.summary}}

    def previews(self, row_ids: list[int], tokens) -> Iterator[dict]:
        """Pictures of the committed tokens [B, N] (-1: not yet) of the request's rows `row_ids`: partial_image
        events."""
        from mmspec.pipelines.outputs import cells

        for j, image in zip(row_ids, self.pipe.pictures(cells(tokens, self.pipe.layout))):
            yield {"type": "image_generation.partial_image", "index": j, "b64_json": media.png(image)}

    def completed(self, req: ImageRequest, out) -> Iterator[dict]:
        answer = self.answer(req, out)
        for j, item in enumerate(answer["data"]):
            yield {"type": "image_generation.completed", "index": j, "b64_json": item["b64_json"],
                   "created_at": answer["created"], "mmspec": {"seed": req.seed + j, "summary": out.summary}}


class VideoDoor(Door):
    kind, path, request = "video", "/v1/videos/generations", VideoRequest

    def prepare(self, req: VideoRequest):
        self.check(req)
        _check_prompt(req.prompt)
        options = self.options(req)
        if req.image is not None:  # the first frame: given tokens the clip continues from
            options["image"] = media.picture(req.image, "image")
        return (lambda on_commit: self.pipe(req.prompt, on_commit=on_commit, **options)), self.tokens(req), 0

    def answer(self, req: VideoRequest, out) -> dict:
        return {"created": int(time.time()), "data": [{"b64_json": media.mp4(frames), "mime_type": "video/mp4",
                                                       "frames": len(frames)} for frames in out.videos],
                "mmspec": {"seeds": [req.seed + j for j in range(req.n)], "summary": out.summary}}

    def completed(self, req: VideoRequest, out) -> Iterator[dict]:
        answer = self.answer(req, out)
        for j, item in enumerate(answer["data"]):
            yield {"type": "video_generation.completed", "index": j, **item,
                   "mmspec": {"seed": req.seed + j, "summary": out.summary}}


class TextDoor(Door):
    kind, path, request = "text", "/v1/completions", CompletionRequest

    def prepare(self, req: CompletionRequest, stream=None):
        """stream(row, text): each row's new text as it commits (a streamed request's)."""
        self.check(req)
        prompts = req.prompts()
        options = dict(self.options(req), max_new_tokens=req.max_tokens, stop_strings=req.stops(), stream=stream)
        return (lambda on_commit: self.pipe(prompts, on_commit=on_commit, **options)), \
            len(prompts) * req.n * req.max_tokens, 0

    def answer(self, req: CompletionRequest, out, id: "str | None" = None) -> dict:
        tokenizer = self.pipe.target.tokenizer
        prompt_tokens = sum(len(tokenizer(p)["input_ids"]) for p in req.prompts()) * req.n
        completion = sum(len(t) for t in out.tokens)
        return {**self.chunk(req, id), "choices": [
                    {"text": text, "index": i, "logprobs": None, "finish_reason": self.finish(req, tokens)}
                    for i, (text, tokens) in enumerate(zip(out.texts, out.tokens))],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
                          "total_tokens": prompt_tokens + completion},
                "mmspec": {"seeds": [req.seed + j for j in range(req.n)], "summary": out.summary}}

    def chunk(self, req: CompletionRequest, id: "str | None" = None, choices: "list | None" = None) -> dict:
        """The fields every completion object has (one id for all chunks of a stream)."""
        head = {"id": id or f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": self.name}
        return head if choices is None else {**head, "choices": choices}

    @staticmethod
    def finish(req: CompletionRequest, tokens) -> str:
        return "length" if len(tokens) >= req.max_tokens else "stop"


DOORS = {door.kind: door for door in (ImageDoor, VideoDoor, TextDoor)}

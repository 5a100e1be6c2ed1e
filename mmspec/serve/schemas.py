"""The requests the service takes, as OpenAI's Images and Completions APIs spell them plus mmspec's own fields, and
the server's limits on them. Pydantic checks types and ranges; `Limits.check` what the server was started with."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field

MAX_SEED = 2**63 - 1  # mmspec's row seeds (mmspec.api.row_seeds)


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (`mmspec serve` options); a request past one is refused in one line (400)."""

    max_n: int = 4  # outputs per request
    max_prompt_chars: int = 2000
    max_tokens: int = 512  # text: new tokens per completion
    max_seconds: float = 120.0  # from acceptance to answer: past it, the request is cancelled (504)
    max_body_bytes: int = 4 << 20  # a request's body, pictures included (base64)

    def check(self, request: "Generation") -> None:
        prompts = request.prompt if isinstance(request.prompt, list) else [request.prompt]
        outputs = len(prompts) * request.n
        if outputs > self.max_n:
            asked = f"n is {request.n}" if len(prompts) == 1 else \
                f"{len(prompts)} prompts x n {request.n} ask for {outputs}"
            raise ValueError(f"{asked}: this server makes at most {self.max_n} outputs a request (--max-n)")
        longest = max(map(len, prompts), default=0)
        if longest > self.max_prompt_chars:
            raise ValueError(f"prompt is {longest} characters: this server takes at most {self.max_prompt_chars}")
        if isinstance(request, CompletionRequest) and request.max_tokens > self.max_tokens:
            raise ValueError(f"max_tokens is {request.max_tokens}: this server makes at most {self.max_tokens} "
                             "tokens a completion (--max-tokens)")


class Generation(BaseModel):
    """The fields every door takes: mmspec's seed, method, window and sampling (None: the model's default)."""

    model_config = ConfigDict(extra="forbid")  # a misspelt field is refused, not ignored

    model: "str | None" = None  # OpenAI's clients send it; the server runs one model, named by GET /v1/models
    n: int = Field(1, ge=1)
    seed: int = Field(0, ge=0, le=MAX_SEED)  # output j gets seed + j, as every mmspec door gives it
    method: str = "exact"  # a method's name only: a spec with options could name a folder on the server
    window: Union[int, Literal["auto"]] = "auto"
    temperature: "float | None" = Field(None, ge=0)
    top_k: "int | None" = Field(None, ge=1)
    top_p: "float | None" = Field(None, gt=0, le=1)
    cfg_scale: "float | None" = None
    stream: bool = False
    user: "str | None" = None  # OpenAI's end-user id: taken, not used

    def sampling(self) -> "dict | None":
        """The sampling fields given (the others stay the model's defaults) -> a pipeline's sampling=."""
        given = {k: getattr(self, k) for k in ("temperature", "top_k", "top_p", "cfg_scale")
                 if getattr(self, k) is not None}
        return given or None


class ImageRequest(Generation):
    """POST /v1/images/generations. image and mask (base64 PNG or JPEG, the mask nonzero where to regenerate):
    inpainting."""

    prompt: str = Field(min_length=1)
    size: "str | None" = None  # "WxH": must be the model's own (it makes one size), or "auto"
    response_format: Literal["b64_json"] = "b64_json"  # no URLs: the server writes no files
    partial_images: int = Field(0, ge=0, le=3)  # streaming: previews of the committed tokens before the end
    image: "str | None" = None
    mask: "str | None" = None


class VideoRequest(Generation):
    """POST /v1/videos/generations. image: the first frame (base64), given tokens the clip continues from."""

    prompt: str = Field(min_length=1)
    response_format: Literal["b64_json"] = "b64_json"  # the MP4's bytes
    image: "str | None" = None


class CompletionRequest(Generation):
    """POST /v1/completions."""

    prompt: Union[str, list[str]]
    max_tokens: int = Field(16, ge=1)
    stop: Union[str, list[str], None] = None
    # OpenAI fields with one meaning here: echo and logprobs are not made
    echo: Literal[False] = False
    logprobs: Literal[None] = None

    def prompts(self) -> list[str]:
        prompts = self.prompt if isinstance(self.prompt, list) else [self.prompt]
        if not prompts or not all(prompts):
            raise ValueError("prompt must be a non-empty string or a non-empty list of them")
        return prompts

    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

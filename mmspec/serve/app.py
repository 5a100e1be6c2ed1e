"""The FastAPI app over one pipeline: its kind's door (POST), GET /v1/models, /health and /metrics; a bounded body, a
bearer key when one is set, errors in OpenAI's shape with one line, server-sent events when `stream` is true, and a
client that goes away cancelling its request. (No `from __future__ import annotations`: FastAPI reads the
endpoints' annotations as types.)"""
import asyncio
import hmac
import json
import logging
import time
import uuid
from typing import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException

from mmspec.options import CONCURRENCY
from mmspec.serve.backend import Backend, share_engines
from mmspec.serve.doors import DOORS, Door, TextDoor
from mmspec.serve.schemas import Limits
from mmspec.serve.tickets import Refused, Ticket

log = logging.getLogger("mmspec.serve")
POLL_SECONDS = 0.25  # how often a waiting handler asks whether its client is still there
GONE = 499  # nginx's "client closed request": counted, never sent
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
               413: "invalid_request_error", 429: "rate_limit_error", 503: "server_error", 504: "timeout_error"}
OPEN_PATHS = ("/health",)  # what answers without the key: a load balancer's probe


def create_app(pipe, name: str, *, slots: int = CONCURRENCY, max_queue: int = 16, limits: Limits = Limits(),
               api_key: "str | None" = None, backend: "Backend | None" = None) -> FastAPI:
    """The service of `pipe` (its kind's door), named `name` in /v1/models; `slots` calls at a time, `max_queue`
    waiting (429 past them); `api_key`: the bearer token every path but /health needs (None: none)."""
    door = DOORS[pipe.kind](pipe, name)
    backend = backend or Backend(slots, max_queue)
    shared = share_engines(pipe, backend.slots * limits.max_n)  # room for every running call's rows
    app = FastAPI(title="mmspec serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.backend = backend
    counters = backend.counters

    app.add_middleware(Guard, api_key=api_key, max_body_bytes=limits.max_body_bytes, counters=counters)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError):
        counters.outcome(400)
        first = err.errors()[0]
        if first.get("type") == "json_invalid":
            return error(400, "the body is not valid JSON")
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        return error(400, f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(Refused)
    async def refused(request: Request, err: Refused):
        counters.outcome(err.status)
        return error(err.status, err.message, err.headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):
        counters.outcome(err.status_code)
        return error(err.status_code, str(err.detail), dict(err.headers or {}))

    @app.get("/health")
    async def health():
        state = "draining" if backend.draining else "ok"
        return JSONResponse({"status": state, "model": name, "kind": door.kind, "queue": backend.depth,
                             "busy": backend.busy, "slots": backend.slots, "shared_engines": shared},
                            status_code=503 if backend.draining else 200)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "mmspec",
                                            "kind": door.kind, "path": door.path, "methods": door.methods}]}

    @app.get("/metrics")
    async def metrics():
        return PlainTextResponse(counters.text(backend.depth, backend.busy, backend.slots, backend.draining),
                                 media_type="text/plain; version=0.0.4")

    async def endpoint(request: Request, body):
        """The door's POST, its body parsed as its request model (set below)."""
        if body.model not in (None, name):
            raise Refused(404, f"model {body.model!r} is not served here: this server runs {name!r}")
        stream_text = TextQueue() if isinstance(door, TextDoor) and body.stream else None
        try:
            limits.check(body)
            call, total, previews = door.prepare(body, stream_text) if stream_text is not None else door.prepare(body)
        except (ValueError, TypeError) as err:
            raise Refused(400, one_line(err)) from None
        loop = asyncio.get_running_loop()
        ticket = Ticket(call, total=total, loop=loop, deadline=time.monotonic() + limits.max_seconds,
                        previews=previews, max_seconds=limits.max_seconds)
        if stream_text is not None:
            stream_text.ticket = ticket
        backend.submit(ticket)
        first = await next_event(request, ticket, backend)  # errors before the first commit: a status, not a stream
        if body.stream:
            return StreamingResponse(sse(door, body, ticket, first, request, backend),
                                     media_type="text/event-stream", headers={"Cache-Control": "no-store"})
        while first[0] != "done":
            first = await next_event(request, ticket, backend)
        answer = await asyncio.to_thread(door.answer, body, first[1])  # (PNG and MP4 encoding off the loop)
        counters.outcome("ok")
        return answer

    endpoint.__annotations__["body"] = door.request
    app.post(door.path)(endpoint)
    for other in DOORS.values():
        if other.kind != door.kind:
            app.post(other.path)(elsewhere(door, name))
    return app


def elsewhere(door: Door, name: str):
    async def refuse():
        raise Refused(404, f"this server runs {name!r}, which makes {door.kind}s: POST {door.path}")
    return refuse


class TextQueue:
    """A text pipeline's stream(row, text), posted to the request's ticket."""

    ticket: "Ticket | None" = None

    def __call__(self, row: int, text: str) -> None:
        self.ticket.post("text", (row, text))


async def next_event(request: Request, ticket: Ticket, backend: Backend) -> tuple:
    """The ticket's next event, asking at least every POLL_SECONDS whether the client is still there (if not, the
    request is cancelled); an error event raised as a Refused."""
    while True:
        if time.monotonic() - ticket.asked > POLL_SECONDS:  # (events may come faster than that: each forward's)
            ticket.asked = time.monotonic()
            if await request.is_disconnected():
                backend.cancel(ticket, Refused(GONE, "the client went away"))
        try:
            kind, value = await asyncio.wait_for(ticket.events.get(), POLL_SECONDS)
        except asyncio.TimeoutError:
            continue
        if kind == "error":
            raise as_refused(value)
        return kind, value


def as_refused(err: BaseException) -> Refused:
    """A pipeline call's error -> its answer: Refused as it is; what the request asked wrong (ValueError, TypeError:
    the pipeline's one-line refusals) 400; anything else 500, logged with its traceback."""
    if isinstance(err, Refused):
        return err
    if isinstance(err, (ValueError, TypeError)):
        return Refused(400, one_line(err))
    log.error("pipeline call failed", exc_info=err)
    return Refused(500, f"the pipeline failed: {type(err).__name__}: {one_line(err)}")


async def sse(door: Door, body, ticket: Ticket, first: tuple, request: Request,
              backend: Backend) -> AsyncIterator[str]:
    """Server-sent events: progress and previews (images), text chunks (completions, OpenAI's), then the outputs;
    an error after the stream began is an error event. Closing the stream (the client gone) cancels the request."""
    counters, event, chunk_id = backend.counters, first, f"cmpl-{uuid.uuid4().hex}"
    ended = False  # answered, or an error event sent: else the stream was closed under it (the client gone)
    try:
        while True:
            kind, value = event
            if kind == "progress" and not isinstance(door, TextDoor):
                yield data({"type": f"{door.kind}_generation.progress", "committed": value, "total": ticket.total})
            elif kind == "preview":
                for item in await asyncio.to_thread(lambda: list(door.previews(*value))):
                    yield data(item)
            elif kind == "text":
                row, text = value
                yield data(door.chunk(body, chunk_id, [{"text": text, "index": row, "logprobs": None,
                                                        "finish_reason": None}]))
            elif kind == "done":
                if isinstance(door, TextDoor):
                    yield data(door.chunk(body, chunk_id, [{"text": "", "index": i, "logprobs": None,
                                                            "finish_reason": door.finish(body, t)}
                                                           for i, t in enumerate(value.tokens)]))
                    yield "data: [DONE]\n\n"
                else:
                    for item in await asyncio.to_thread(lambda: list(door.completed(body, value))):
                        yield data(item)
                counters.outcome("ok")
                ended = True
                return
            try:
                event = await next_event(request, ticket, backend)
            except Refused as err:
                counters.outcome(err.status)
                ended = True
                yield data({"type": "error", "error": {"message": err.message, "code": err.status}})
                return
    finally:
        if not ended:
            counters.outcome(GONE)
            backend.cancel(ticket, Refused(GONE, "the client went away"))


def data(item: dict) -> str:
    return f"data: {json.dumps(item)}\n\n"


def error(status: int, message: str, headers: "dict | None" = None) -> JSONResponse:
    """OpenAI's error shape: {"error": {"message", "type", "code"}}."""
    return JSONResponse({"error": {"message": message, "type": ERROR_TYPES.get(status, "server_error"),
                                   "code": status}}, status_code=status, headers=headers)


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


class Guard:
    """ASGI middleware: the key (a constant-time compare), then the body's size, as declared and as it arrives (a
    chunked body declares none)."""

    def __init__(self, app, api_key: "str | None", max_body_bytes: int, counters):
        self.app, self.max_body_bytes, self.counters = app, max_body_bytes, counters
        self.expected = None if api_key is None else f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        if self.expected is not None and scope["path"] not in OPEN_PATHS \
                and not hmac.compare_digest(headers.get(b"authorization", b""), self.expected):
            self.counters.outcome(401)
            return await error(401, "a valid API key is needed: Authorization: Bearer KEY",
                               {"WWW-Authenticate": "Bearer"})(scope, receive, send)
        declared = headers.get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_body_bytes:
            self.counters.outcome(413)
            return await error(413, self.too_large)(scope, receive, send)
        await self.app(scope, self.bounded(receive), send)

    @property
    def too_large(self) -> str:
        return f"the request body is larger than this server's {self.max_body_bytes} bytes (--max-body)"

    def bounded(self, receive):
        received = 0

        async def receive_bounded():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:  # (FastAPI passes an HTTPException on to the handlers)
                    raise HTTPException(413, self.too_large)
            return message
        return receive_bounded

"""A ticket: one accepted request between the HTTP handler (an asyncio task) and the worker thread that runs its
pipeline call. The worker posts events onto the handler's loop: progress as tokens commit, previews, the output or
the error; the handler stops the call through the ticket (a client gone, the time limit, a drain), which the call
sees at its next forward (the pipeline's on_commit hook) and ends there."""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import torch


class Refused(Exception):
    """What the service answers instead of an output: an HTTP status, one line, and headers (Retry-After)."""

    def __init__(self, status: int, message: str, headers: "dict | None" = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class Stopped(Exception):
    """Raised inside the pipeline call, from its on_commit hook, to end it at this forward."""

    def __init__(self, reason: Refused):
        super().__init__(reason.message)
        self.reason = reason


class Ticket:
    """call(on_commit) -> the pipeline's output, run by a worker; `total` tokens it commits in all (progress);
    `deadline`: time.monotonic() past which it is stopped (504); `previews`: snapshots of the committed tokens to post
    on the way (0: none), evenly spaced over the tokens."""

    def __init__(self, call: Callable[[Callable], Any], *, total: int, loop: asyncio.AbstractEventLoop,
                 deadline: "float | None" = None, previews: int = 0, max_seconds: "float | None" = None):
        self.call, self.total, self.loop = call, total, loop
        self.deadline, self.max_seconds, self.previews = deadline, max_seconds, previews
        self.events: asyncio.Queue = asyncio.Queue()
        self.committed = 0
        self.reason: "Refused | None" = None  # why it was stopped (the first reason given)
        self._shown = 0  # previews posted
        self.asked = time.monotonic()  # when the handler last asked whether its client is still there

    def stop(self, reason: Refused) -> None:
        """Ends the call at its next forward (a call not started yet is not started)."""
        if self.reason is None:
            self.reason = reason

    def expired(self) -> bool:
        """Whether it is past its deadline; then stopped with 504."""
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.stop(Refused(504, f"the request ran past this server's limit of {self.max_seconds:g} s from "
                                   "acceptance to answer (--max-seconds): ask for fewer or smaller outputs"))
        return self.reason is not None

    def post(self, kind: str, value: Any = None) -> None:
        """An event for the handler, from any thread: ("progress", committed), ("preview", (row_ids, tokens
        [B, N], -1 where not committed)), ("text", (row, new text)), ("done", output), ("error", exception)."""
        self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))

    def on_commit(self, state, k) -> None:
        """The pipeline's hook after every forward: k [B] tokens committed per row of the batch in `state`."""
        if self.expired():
            raise Stopped(self.reason)
        self.committed += int(k.sum())
        self.post("progress", self.committed)
        if self._shown < self.previews and self.committed * (self.previews + 1) >= (self._shown + 1) * self.total:
            self._shown += 1
            n = state.length
            tokens = state.seq[:, :n].masked_fill(torch.arange(n, device=state.n.device) >= state.n[:, None], -1)
            self.post("preview", (list(state.row_ids), tokens.cpu()))

    async def outcome(self) -> Any:
        """The output, skipping the events before it; the error raised."""
        while True:
            kind, value = await self.events.get()
            if kind == "done":
                return value
            if kind == "error":
                raise value

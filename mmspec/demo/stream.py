"""Run one pipeline call in a worker thread and stream snapshots of what it has committed so far.

The pipeline calls the on_commit hook after every forward; the hook only copies the committed
tokens (cheap), so decoding previews happens here, in the consumer, at its own pace. A request too large for memory
runs in batches: a snapshot holds every row so far, each batch's rows as they ended.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch


class Cancelled(Exception):
    """Raised inside the worker when the consumer went away (a cancelled or closed event)."""


@dataclass
class Snapshot:
    tokens: torch.Tensor  # [B, N] committed tokens, -1 past each row's committed prefix
    committed: int  # tokens committed over all rows


class _Open:
    """How many streams run now: the previews of all of them share one rate (visitors whose rows share one decode
    would otherwise spend the cores on pictures of it)."""

    def __init__(self):
        self.count, self._lock = 0, threading.Lock()

    def add(self, n: int) -> None:
        with self._lock:
            self.count += n


OPEN = _Open()


PREVIEW_SHARE = 0.1  # of the wall time, what one stream's snapshots may cost their consumer (a preview picture
# decoded and sent): measured on a 2-core CPU, previews every 0.1 s doubled a lone visitor's 1 s image


def stream(call: Callable[[Callable], Any], interval: float = 0.1) -> Iterator["Snapshot | Any"]:
    """Yields Snapshots, then the output of `call(on_commit)`. Errors of the call are raised here. Closing the
    iterator stops the worker at its next forward.

    Snapshots come at most one per `gap` seconds: the larger of `interval` and what the consumer spent on the last
    one (from its yield to the next request) over PREVIEW_SHARE, times the streams running now (their previews share
    the cores with the decode they watch); only the newest when the consumer is slower than that. A batch's last
    forward always gives one (its rows as they end)."""
    events: queue.Queue = queue.Queue()
    closed = threading.Event()
    last, spent = [float("-inf")], [0.0]  # when the last snapshot was taken; seconds the consumer spent on one
    rows: dict[int, torch.Tensor] = {}  # the request's row -> its committed tokens [N], over the batches it runs in

    def on_commit(state, k):
        if closed.is_set():
            raise Cancelled
        now = time.monotonic()
        if now - last[0] >= max(interval, spent[0] / PREVIEW_SHARE) * max(1, OPEN.count) or not state.active.any():
            last[0] = now
            N = state.length
            tokens = state.seq[:, :N].masked_fill(torch.arange(N, device=state.n.device) >= state.n[:, None], -1)
            rows.update(zip(state.row_ids, tokens.cpu()))
            shown = torch.stack([rows[i] for i in sorted(rows)])  # [rows so far, N]
            events.put(("snapshot", Snapshot(shown, int((shown >= 0).sum()))))

    def work():
        try:
            events.put(("done", call(on_commit)))
        except BaseException as err:  # handed to the consumer, which raises it
            events.put(("error", err))

    threading.Thread(target=work, name="mmspec-demo-run", daemon=True).start()
    OPEN.add(1)
    try:
        while True:
            kind, value = events.get()
            while kind == "snapshot" and not events.empty():  # skip stale snapshots
                kind, value = events.get_nowait()
            if kind == "error":
                raise value
            handed = time.monotonic()
            yield value
            if kind == "done":
                return
            spent[0] = time.monotonic() - handed
    finally:
        OPEN.add(-1)
        closed.set()

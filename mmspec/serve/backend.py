"""The backend: a bounded queue of tickets and `slots` worker threads, each running one pipeline call at a time.

Concurrent calls on one pipeline are safe: a call's decode state (its KV cache, its rows) is its own; what calls share
is read-only weights, the auto windows' learned costs (a dict of floats), and torch's CPU thread count, which
mmspec.threads.call_threads sets for the outermost of overlapping calls and restores when the last one ends (a
lock and a depth count). Outputs do not depend on what runs beside them: a row's noise belongs to its seed and
positions. A pipeline with `share_engines(rows)` batches the concurrent calls into one running decode (mmspec.engine); it is
told once how many rows (the slots times the outputs a request may ask), and nothing else changes here."""
from __future__ import annotations

import math
import threading
import time
from collections import deque

from mmspec.serve.metrics import Counters
from mmspec.serve.tickets import Refused, Stopped, Ticket

SHUTTING_DOWN = "the server is shutting down (SIGTERM): send the request to another replica, or retry later"


def share_engines(pipe, slots: int) -> bool:
    """Tells a pipeline that batches concurrent calls into one decode how many rows it may run at once; whether it
    can."""
    share = getattr(pipe, "share_engines", None)
    if share is not None:
        share(slots)
    return share is not None


class Backend:
    def __init__(self, slots: int = 1, max_queue: int = 16, counters: "Counters | None" = None):
        if slots < 1 or max_queue < 0:
            raise ValueError(f"slots must be >= 1 and max_queue >= 0, got {slots} and {max_queue}")
        self.slots, self.max_queue = slots, max_queue
        self.counters = counters or Counters()
        self.draining = False
        self._waiting: deque[Ticket] = deque()
        self._running: set[Ticket] = set()
        self._closed = False
        self._cond = threading.Condition()
        self._threads = [threading.Thread(target=self._work, name=f"mmspec-serve-slot-{i}", daemon=True)
                         for i in range(slots)]
        for thread in self._threads:
            thread.start()

    @property
    def depth(self) -> int:
        return len(self._waiting)

    @property
    def busy(self) -> int:
        return len(self._running)

    def retry_after(self) -> int:
        """Seconds until a slot is likely free for one more request: the waiting calls' share of the slots, at the
        mean call's wall-clock so far."""
        return max(1, math.ceil(self.counters.mean_seconds() * (len(self._waiting) + 1) / self.slots))

    def submit(self, ticket: Ticket) -> None:
        """Queues a ticket; Refused 503 while draining, 429 with Retry-After when `max_queue` tickets wait."""
        with self._cond:
            if self.draining:
                raise Refused(503, SHUTTING_DOWN, {"Retry-After": "5"})
            if len(self._waiting) >= self.max_queue:
                wait = self.retry_after()
                raise Refused(429, f"the queue is full ({self.max_queue} requests wait for {self.slots} slots): "
                                   f"retry in {wait} s", {"Retry-After": str(wait)})
            self._waiting.append(ticket)
            self._cond.notify()

    def cancel(self, ticket: Ticket, reason: Refused) -> None:
        """Ends a ticket: one still waiting leaves the queue (its error posted), a running one stops at its next
        forward (its worker posts the error)."""
        with self._cond:
            ticket.stop(reason)
            if ticket in self._waiting:
                self._waiting.remove(ticket)
                ticket.post("error", reason)

    def drain(self, seconds: float) -> int:
        """Takes no new tickets (503) and lets the accepted ones finish for up to `seconds`; those left then are
        stopped and answered 503. Returns how many were cut short."""
        deadline = time.monotonic() + seconds
        with self._cond:
            self.draining = True
            while (self._waiting or self._running) and time.monotonic() < deadline:
                self._cond.wait(timeout=max(0.0, deadline - time.monotonic()))
            left = [*self._waiting, *self._running]
        for ticket in left:
            self.cancel(ticket, Refused(503, f"{SHUTTING_DOWN}; it stopped this request at the drain's deadline"))
        with self._cond:  # the running calls stop at their next forward
            while self._running:
                self._cond.wait(timeout=1.0)
        return len(left)

    def close(self) -> None:
        """Stops the workers once the queue is empty (drain first to bound the wait)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if not self._waiting:
                    return
                ticket = self._waiting.popleft()
                self._running.add(ticket)
            try:
                self._run(ticket)
            finally:
                with self._cond:
                    self._running.discard(ticket)
                    self._cond.notify_all()

    def _run(self, ticket: Ticket) -> None:
        if ticket.expired():  # it waited past its deadline: not started
            ticket.post("error", ticket.reason)
            return
        started = time.perf_counter()
        try:
            out = ticket.call(ticket.on_commit)
        except Stopped as stop:
            ticket.post("error", stop.reason)
        except BaseException as err:  # noqa: BLE001 - handed to the request's handler, which answers it
            ticket.post("error", err)
        else:
            summary = getattr(out, "summary", {}) or {}
            self.counters.call(int(summary.get("nfe", 0)), int(summary.get("tokens", 0)),
                               time.perf_counter() - started)
            ticket.post("done", out)

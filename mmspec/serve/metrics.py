"""What the service counts, and its Prometheus text exposition (GET /metrics): requests by outcome, queue depth and
busy slots (read from the backend when scraped), target forwards, committed tokens, acceptance, tokens/s."""
from __future__ import annotations

import threading
import time
from collections import Counter, deque

RATE_SECONDS = 60.0  # tokens/s is over the requests that ended in the last minute


class Counters:
    def __init__(self):
        self._lock = threading.Lock()
        self.outcomes: Counter = Counter()  # outcome (ok, 400, 429, 499, 503, 504, 500) -> requests
        self.calls = self.forwards = self.tokens = 0  # of the pipeline calls that ended with their output
        self.seconds = 0.0  # pipeline calls' wall-clock, summed
        self._recent: deque = deque()  # (end time, tokens) of the calls that ended in the last RATE_SECONDS

    def outcome(self, outcome: "str | int") -> None:
        with self._lock:
            self.outcomes[str(outcome)] += 1

    def call(self, forwards: int, tokens: int, seconds: float) -> None:
        """A pipeline call that ended with its output."""
        with self._lock:
            self.calls += 1
            self.forwards += forwards
            self.tokens += tokens
            self.seconds += seconds
            self._recent.append((time.monotonic(), tokens))

    def mean_seconds(self) -> float:
        """A call's mean wall-clock so far (1 s before the first): what Retry-After is estimated from."""
        with self._lock:
            return self.seconds / self.calls if self.calls else 1.0

    def tokens_per_second(self) -> float:
        with self._lock:
            now = time.monotonic()
            while self._recent and self._recent[0][0] < now - RATE_SECONDS:
                self._recent.popleft()
            return sum(t for _, t in self._recent) / RATE_SECONDS

    def text(self, queue_depth: int, busy: int, slots: int, draining: bool) -> str:
        """The Prometheus text format (version 0.0.4)."""
        rate = self.tokens_per_second()
        with self._lock:
            lines = _metric("mmspec_requests_total", "counter", "requests by outcome: ok, or the HTTP status refusing "
                            "them (499: the client went away)",
                            [(f'{{outcome="{k}"}}', v) for k, v in sorted(self.outcomes.items())] or [("", 0)])
            lines += _metric("mmspec_queue_depth", "gauge", "accepted requests waiting for a slot", [("", queue_depth)])
            lines += _metric("mmspec_slots_busy", "gauge", "slots running a pipeline call", [("", busy)])
            lines += _metric("mmspec_slots", "gauge", "pipeline calls at a time (--slots)", [("", slots)])
            lines += _metric("mmspec_draining", "gauge", "1 while a SIGTERM drain runs", [("", int(draining))])
            lines += _metric("mmspec_forwards_total", "counter", "target forwards of the calls that ended",
                             [("", self.forwards)])
            lines += _metric("mmspec_tokens_total", "counter", "tokens committed by the calls that ended",
                             [("", self.tokens)])
            lines += _metric("mmspec_mean_acceptance_length", "gauge", "tokens committed per target forward, so far",
                             [("", round(self.tokens / self.forwards, 4) if self.forwards else 0)])
            lines += _metric("mmspec_tokens_per_second", "gauge", f"tokens committed per second over the last "
                             f"{RATE_SECONDS:g} s", [("", round(rate, 3))])
            lines += _metric("mmspec_call_seconds_total", "counter", "pipeline calls' wall-clock, summed",
                             [("", round(self.seconds, 6))])
        return "\n".join(lines) + "\n"


def _metric(name: str, kind: str, help: str, samples: list[tuple[str, float]]) -> list[str]:
    return [f"# HELP {name} {help}", f"# TYPE {name} {kind}"] + [f"{name}{labels} {value}" for labels, value in samples]

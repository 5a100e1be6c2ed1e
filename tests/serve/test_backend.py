"""The backend with calls that wait on the test: a full queue is a 429 with Retry-After, a cancelled request never
runs or stops at its next forward, a drain lets the accepted calls finish and answers 503 past its deadline, a call
past its time limit is a 504."""
import asyncio
import threading
import time

import pytest
import torch

from mmspec.serve.backend import Backend
from mmspec.serve.tickets import Refused, Ticket


def gated(gate: threading.Event, steps: int = 3, started: "threading.Event | None" = None):
    """A call that waits for `gate`, then commits one token per forward for `steps` forwards -> "out"."""
    def call(on_commit):
        if started is not None:
            started.set()
        assert gate.wait(timeout=30)
        for _ in range(steps):
            on_commit(None, torch.ones(1, dtype=torch.long))
            time.sleep(0.01)
        return "out"
    return call


async def outcome(ticket: Ticket):
    try:
        return await asyncio.wait_for(ticket.outcome(), 30)
    except Refused as err:
        return err.status


def test_a_full_queue_is_a_429_with_retry_after_and_the_accepted_ones_run():
    async def main():
        backend, gate, loop = Backend(slots=1, max_queue=2), threading.Event(), asyncio.get_running_loop()
        started = threading.Event()
        tickets = [Ticket(gated(gate, started=started), total=3, loop=loop)]
        backend.submit(tickets[0])
        await asyncio.to_thread(started.wait, 30)  # the first runs; two more wait, the fourth is refused
        tickets += [Ticket(gated(gate), total=3, loop=loop) for _ in range(2)]
        for t in tickets[1:]:
            backend.submit(t)
        with pytest.raises(Refused) as refused:
            backend.submit(Ticket(gated(gate), total=3, loop=loop))
        assert refused.value.status == 429 and int(refused.value.headers["Retry-After"]) >= 1
        assert "the queue is full (2 requests wait for 1 slots)" in refused.value.message
        gate.set()
        assert [await outcome(t) for t in tickets] == ["out"] * 3
        backend.close()
    asyncio.run(main())


def test_a_cancelled_request_never_runs_or_stops_at_its_next_forward():
    async def main():
        backend, gate, loop = Backend(slots=1, max_queue=4), threading.Event(), asyncio.get_running_loop()
        started = threading.Event()
        running = Ticket(gated(gate, steps=100, started=started), total=100, loop=loop)
        ran = []
        waiting = Ticket(lambda on_commit: ran.append(1), total=1, loop=loop)
        backend.submit(running)
        backend.submit(waiting)
        await asyncio.to_thread(started.wait, 30)
        backend.cancel(waiting, Refused(499, "gone"))
        backend.cancel(running, Refused(499, "gone"))
        gate.set()
        assert await outcome(waiting) == 499 and await outcome(running) == 499
        assert running.committed == 0 and ran == []  # stopped at its first forward; the other never started
        backend.close()
    asyncio.run(main())


def test_a_drain_finishes_the_accepted_refuses_the_new_and_cuts_at_its_deadline():
    async def main():
        backend, loop = Backend(slots=1, max_queue=4), asyncio.get_running_loop()
        gate, started = threading.Event(), threading.Event()
        quick = [Ticket(gated(gate, started=started), total=3, loop=loop), Ticket(gated(gate), total=3, loop=loop)]
        for t in quick:
            backend.submit(t)
        await asyncio.to_thread(started.wait, 30)
        drain = asyncio.ensure_future(asyncio.to_thread(backend.drain, 30))
        while not backend.draining:
            await asyncio.sleep(0.01)
        with pytest.raises(Refused) as refused:
            backend.submit(Ticket(gated(gate), total=3, loop=loop))
        assert refused.value.status == 503
        gate.set()
        assert [await outcome(t) for t in quick] == ["out", "out"] and await drain == 0

        late_backend, stuck = Backend(slots=1, max_queue=4), threading.Event()  # calls that outlive the deadline
        late = [Ticket(gated(stuck, started=threading.Event()), total=3, loop=loop) for _ in range(2)]
        for t in late:
            late_backend.submit(t)
        cut = asyncio.ensure_future(asyncio.to_thread(late_backend.drain, 0.2))
        await asyncio.sleep(0.5)
        stuck.set()  # (the running call reaches its next forward, where it stops)
        assert await cut == 2 and [await outcome(t) for t in late] == [503, 503]
        backend.close()
        late_backend.close()
    asyncio.run(main())


def test_a_call_past_its_time_limit_is_a_504():
    async def main():
        backend, gate, loop = Backend(slots=1, max_queue=1), threading.Event(), asyncio.get_running_loop()
        ticket = Ticket(gated(gate, steps=2), total=2, loop=loop, deadline=time.monotonic() + 0.1, max_seconds=0.1)
        backend.submit(ticket)
        await asyncio.sleep(0.3)
        gate.set()
        assert await outcome(ticket) == 504
        backend.close()
    asyncio.run(main())


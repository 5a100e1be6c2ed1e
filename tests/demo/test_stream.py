import threading
import time
from types import SimpleNamespace

import pytest
import torch

from mmspec.demo.stream import Cancelled, Snapshot, stream


def fake_run(steps: int, errors: list, delay: float = 0.0):
    """A pipeline call committing one token per forward into a [1, steps] grid; returns "out"."""
    def call(on_commit):
        state = SimpleNamespace(seq=torch.arange(steps + 2)[None], n=torch.zeros(1, dtype=torch.long), length=steps,
                                row_ids=[0], active=torch.ones(1, dtype=torch.bool))
        try:
            for _ in range(steps):
                time.sleep(delay)
                state.n += 1
                state.active = state.n < steps
                on_commit(state, torch.ones(1, dtype=torch.long))
        except Cancelled as err:
            errors.append(err)
            raise
        return "out"
    return call


def test_snapshots_show_committed_tokens_then_the_output():
    seen = threading.Event()  # the run waits after its first commit until the consumer has the first snapshot (a
    run = fake_run(5, [])  # run that is done before the consumer reads skips its snapshots to the output, as it should)

    def call(on_commit):
        def hook(state, k):
            on_commit(state, k)
            assert seen.wait(timeout=60)
        return run(hook)

    items = []
    for item in stream(call, interval=0.0):
        items.append(item)
        seen.set()
    assert items[-1] == "out" and all(isinstance(i, Snapshot) for i in items[:-1])
    first = items[0]
    assert first.committed >= 1 and first.tokens[0, :first.committed].tolist() == list(range(first.committed))
    assert (first.tokens[0, first.committed:] == -1).all()  # drafts past the committed prefix are hidden


def test_errors_of_the_run_are_raised_to_the_consumer():
    def fail(on_commit):
        raise ValueError("window must be an int in [1, 256]")

    with pytest.raises(ValueError, match="window must be"):
        list(stream(fail))


def test_closing_the_stream_stops_the_worker():
    errors = []
    items = stream(fake_run(1000, errors, delay=0.001), interval=0.0)
    assert isinstance(next(items), Snapshot)
    items.close()  # what a cancelled event does
    deadline = time.monotonic() + 5
    while not errors and time.monotonic() < deadline:
        time.sleep(0.01)
    assert errors and not any(t.name == "mmspec-demo-run" for t in threading.enumerate())


def test_a_request_run_in_batches_shows_every_row_so_far_each_batch_s_as_it_ended():
    shown = threading.Semaphore(0)  # the run waits for the consumer after each forward that must give a snapshot

    def call(on_commit):  # 3 rows of 4 tokens, in batches of 2 and 1, two tokens a forward
        for first, b in ((0, 2), (2, 1)):
            state = SimpleNamespace(seq=torch.arange(6).repeat(b, 1) + 10 * first, n=torch.zeros(b, dtype=torch.long),
                                    length=4, row_ids=list(range(first, first + b)), active=torch.ones(b, dtype=torch.bool))
            for forward in range(2):
                state.n += 2
                state.active = state.n < 4
                on_commit(state, torch.full((b,), 2))
                if forward == 1 or first == 0:  # the first forward of all, and each batch's last
                    assert shown.acquire(timeout=60)
        return "out"

    snapshots = []
    for item in stream(call, interval=3600.0):
        snapshots.append(item)
        shown.release()
    assert snapshots[-1] == "out" and [s.tokens.shape[0] for s in snapshots[:-1]] == [2, 2, 3]
    last = snapshots[-2]
    assert last.tokens.tolist() == [[0, 1, 2, 3], [0, 1, 2, 3], [20, 21, 22, 23]] and last.committed == 12


def test_snapshots_slow_down_to_what_their_consumer_spends_on_them():
    """A consumer that spends 20 ms on each snapshot gets one per 0.2 s at most (PREVIEW_SHARE 0.1), not one per
    forward: over a 1 s run ~5, where a rate blind to that cost gives ~45."""
    items = []
    for item in stream(fake_run(1000, [], delay=0.001), interval=0.0):
        items.append(item)
        time.sleep(0.02)  # a preview decoded and sent
    assert items[-1] == "out"
    assert 1 <= len(items) - 1 <= 12, len(items)

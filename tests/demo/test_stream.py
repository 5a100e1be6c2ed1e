import threading
import time
from types import SimpleNamespace

import pytest
import torch

from mmspec.demo.stream import Cancelled, Snapshot, stream


def fake_run(steps: int, errors: list, delay: float = 0.0):
    """A pipeline call committing one token per forward into a [1, steps] grid; returns "out"."""
    def call(on_commit):
        state = SimpleNamespace(seq=torch.arange(steps + 2)[None], n=torch.zeros(1, dtype=torch.long), length=steps)
        try:
            for _ in range(steps):
                time.sleep(delay)
                state.n += 1
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

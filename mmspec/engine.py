"""One engine for many requests: a fixed number of row places (`slots`) over one running decode, where the rows of
requests waiting in the queue take the places of rows that finished, at every step boundary.

A request (`submit`) is a condition, its outputs per condition, seeds, given tokens and a hook; it gets a `Ticket`
whose `result()` is its `Generation`, rows in its order, as `mmspec.generate` returns it. The engine runs *waves*: a
wave opens a target session on the queue's first request (for its rows alone where rows may leave the forwards; else
its places past its rows held by copies of its last row), and from then on, before every step, the rows that
finished are handed to their requests and queued rows join in the free places (`_Wave.__call__`, the loop's
`Joins`): their own session is opened and prefilled, and the wave's session takes its rows (`Takes`: the prefix
left-padded to the wave's, or the wave's rows left-padded to a longer one where the cache may grow), the state
starts them over with their seeds (`DecodeState.admit`), the drafter forgets what the places held (`Admits`). On a
CPU rows that are not running leave the forwards (mmspec.adapters.rows), and come back when a row joins in their
place.

Lossless and batch-invariant: a row's draws are its own seed's (counter-based streams: mmspec.rng), its window each
step is chosen before anything of that step is drawn, and each step's verification is lossless by itself; so a row
that joins mid-wave has the law it has alone, and `exact`'s tokens (Gumbel-max on each position's own noise) are the
ones plain AR draws with its seed, whatever its place, arrival or batch mates. Methods that draw from a counter
(`coupled`) keep the law; their very tokens depend on the windows a row runs (a run of given tokens is taken in one
widened step only when every row is in one), so where tokens are given their rows join a wave only before its first
step, and only rows forced where the wave's are; where none are, at any step. At a fixed window a row's tokens are
then the ones it gets alone, as in any batch.

Rows join only where they can: a drafter that keeps its own sessions (a draft model, a head) does not admit rows, so
its waves run one request's rows; a request whose prompt is longer than the wave's where the cache may not grow (a
compiled step on an accelerator holds its tensors; or the memory free would not hold the grown cache), or whose
given tokens need a wider room, waits for the next wave, and so does every request behind it (first come, first
served). The wave ends when no row runs; the next opens on the queue's first request.

The window policy counts a step's tokens by who waits for them (`DecodeState.groups`): while rows wait for places,
each row alone (a row that finishes gives its place to one waiting: the throughput is the rows' mean advance), else
by the wave's rearmost row (it is done when its last row is).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, Sequence

import torch

from mmspec.adapters.base import Selects, Takes
from mmspec.drafters.base import admits
from mmspec.executor import rows_may_leave
from mmspec.layouts import FREE, Layout
from mmspec.loop import Wave, decode
from mmspec.memory import SHARE, free_bytes, row_bytes, rows_at_once
from mmspec.plan import Plan
from mmspec.request import Generation, check_given, count, forced, forced_rows, row_seeds, take
from mmspec.rng import Streams
from mmspec.sampling import Sampling
from mmspec.state import DecodeState
from mmspec.stats import Stats
from mmspec.steps import Context
from mmspec.threads import module_device


class Cancelled(Exception):
    """What `Ticket.result()` raises for a request cancelled before it finished."""


class Ticket:
    """A submitted request: `result()` waits for its Generation (and raises what ended it instead: an error of the
    run or of its hook, `Cancelled`), `cancel()` ends it at the next step boundary, freeing its places."""

    def __init__(self):
        self._done = threading.Event()
        self._value: "Generation | None" = None
        self._error: "BaseException | None" = None
        self.cancelled = False

    def done(self) -> bool:
        return self._done.is_set()

    def cancel(self) -> None:
        self.cancelled = True

    def result(self, timeout: "float | None" = None) -> Generation:
        if not self._done.wait(timeout):
            raise TimeoutError(f"the request did not finish within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value

    def _end(self, value: "Generation | None" = None, error: "BaseException | None" = None) -> None:
        if not self._done.is_set():
            self._value, self._error = value, error
            self._done.set()


class _Request:
    """A submitted request's rows: what each needs to start, and what finished rows left."""

    def __init__(self, condition, num_samples: int, rows: int, seeds: list[int], fixed: torch.Tensor, room: int,
                 on_commit, length: int):
        self.condition, self.num_samples, self.rows, self.seeds = condition, num_samples, rows, seeds
        self.fixed, self.room, self.on_commit = fixed, room, on_commit  # fixed [B, N] per row
        self.ticket = Ticket()
        self.next = 0  # the first row not started yet
        self.tokens = torch.full((rows, length), -1, dtype=torch.long)
        self.lengths = torch.zeros(rows, dtype=torch.long)
        self.finished: list[tuple[list[int], Stats]] = []  # (rows, their stats), as they finished
        self.ended = 0  # rows finished
        self.started = time.perf_counter()

    def condition_of(self, rows: list[int]):
        """The condition of rows `rows` alone and its samples a condition, as a target's session takes them."""
        if self.condition is None:  # (no condition: a session's rows are its samples)
            return None, len(rows)
        return take(self.condition, torch.tensor(rows) // self.num_samples), 1

    def done(self, rows: list[int], tokens: torch.Tensor, n: torch.Tensor, stats: Stats) -> None:
        """Rows `rows` [b] finished with tokens [b, N], the first n [b] of each committed, and their stats."""
        N = tokens.shape[1]
        tokens, n = tokens.cpu(), n.cpu()
        self.tokens[rows, :N] = tokens.masked_fill(torch.arange(N) >= n[:, None], -1)
        self.lengths[rows] = n
        self.finished.append((rows, stats))
        self.ended += len(rows)
        if self.ended == self.rows:
            stats = Stats.cat([part for _, part in self.finished])
            order = torch.tensor([row for rows, _ in self.finished for row in rows], device=stats.nfe.device).argsort()
            stats = stats.rows(order, stats.commit_step[order], time.perf_counter() - self.started)
            self.ticket._end(Generation(self.tokens, self.lengths, stats))


class RequestRows:
    """A request's rows of a running decode, as its on_commit hook sees them: the DecodeState's fields it reads, of
    those rows alone, in the request's order of them (`row_ids`: each one's row in the request)."""

    def __init__(self, state: DecodeState, places: torch.Tensor, row_ids: list[int]):
        self._state, self._places, self.row_ids = state, places, row_ids
        self.layout, self.length, self.step = state.layout, state.length, state.step

    @property
    def seq(self) -> torch.Tensor:
        return self._state.seq[self._places]

    @property
    def n(self) -> torch.Tensor:
        return self._state.n[self._places]

    @property
    def active(self) -> torch.Tensor:
        return self._state.active[self._places]

    @property
    def batch_size(self) -> int:
        return len(self.row_ids)

    def finish(self, row: int, length: int) -> None:
        self._state.finish(int(self._places[row]), length)


class Engine:
    """Requests of one target, layout, plan, sampling and stop tokens, decoded `slots` rows at a time, rows joining
    as rows leave. `run_until_idle()` runs the waves in the calling thread until the queue is empty; `start()` runs
    them in a thread of the engine's own as requests arrive (`close()` ends it). `joins_rows` False: rows join a wave
    only before its first step (lockstep batches, as a benchmark's baseline)."""

    joins_rows = True

    def __init__(self, target, layout: Layout, planned: Plan, sampling: "Sampling | dict | None" = None, *, slots: int,
                 stop_tokens: "Sequence[int] | None" = None, compile: "bool | dict" = False):
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be an int >= 1, got {slots!r}")
        self.target, self.layout, self.planned, self.slots = target, layout, planned, slots
        self.sampling, self.compile = Sampling.coerce(sampling), compile
        self.stop_tokens = None if stop_tokens is None else list(stop_tokens)
        self._queue: deque[_Request] = deque()
        self._lock = threading.Condition()
        self._thread: "threading.Thread | None" = None
        self._closed = False
        self.waves = self.forwards = 0  # decodes run, and target forwards in all (a clock in forwards: benchmarks)

    def submit(self, condition: Any, *, num_outputs: int = 1, seed: "int | Sequence[int]" = 0,
               given: "torch.Tensor | None" = None,
               on_commit: "Callable[[RequestRows, torch.Tensor], None] | None" = None) -> Ticket:
        """Queue a request (checked before any work): `num_outputs` rows per condition, condition-major, output j of
        each condition with seed + j (or one seed per row); given [R, N] per row, per condition or for all;
        on_commit(rows, k) after every step where its rows run (a `RequestRows`; it may end its rows with `finish`)."""
        conditions = count(condition)
        if conditions is None:
            raise ValueError(f"the engine runs conditions it can count rows of (ids, prompts, features, a dict of "
                             f"them); got {type(condition).__name__}")
        if given is not None:
            given = check_given(given, self.layout, self.target.vocab_size)
        fixed = forced(self.layout, given)  # [R, N]
        rows = conditions * num_outputs
        per_row = forced_rows(fixed, rows, num_outputs, 0)  # [B, N] (refuses given rows of no form)
        request = _Request(condition, num_outputs, rows, row_seeds(seed, rows, num_outputs), per_row,
                           self.planned.room(fixed), on_commit, self.layout.length)
        with self._lock:
            if self._closed:
                raise RuntimeError("the engine is closed")
            self._queue.append(request)
            self._lock.notify_all()
        return request.ticket

    def run_until_idle(self) -> None:
        """Run waves in this thread until no request waits."""
        while True:
            with self._lock:
                if not self._queue:
                    return
            self._run_wave()

    def start(self) -> "Engine":
        """Run waves in a thread of the engine's own as requests arrive (once; `close` ends it)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="mmspec-engine", daemon=True)
                self._thread.start()
        return self

    def close(self, cancel: bool = False) -> None:
        """End the engine's thread once the requests queued now are done, or with `cancel` at the next step boundary
        (every request queued or running ends with Cancelled: a render job interrupted); later submits are
        refused."""
        with self._lock:
            self._closed = True
            if cancel:
                for request in (*self._queue, *self._running):
                    request.ticket.cancel()
            self._lock.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    _running: "tuple[_Request, ...]" = ()

    def places(self, request: _Request, room: int) -> int:
        """The places of a wave opened on `request` with `room`: `slots`, or as many rows as fit in the memory free
        now when fewer (mmspec.memory; DoesNotFit, which ends the request, when not even one does)."""
        condition, _ = request.condition_of([request.next])
        per_row = row_bytes(self.target, condition, self.layout, self.sampling.cfg,
                            room + self.planned.method.tree_nodes)
        return rows_at_once(per_row, self.slots, module_device(self.target))

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._lock.wait()
                if not self._queue:
                    return
            self._run_wave()

    def _run_wave(self) -> None:
        wave = _Wave(self)
        try:
            wave.run()
        except BaseException as err:  # the wave's requests end with it (its first too, if it failed to open); the
            for request in wave.requests() + [wave.head] * (wave.head is not None):  # queue goes on
                request.ticket._end(error=err)
            with self._lock:
                while self._queue and self._queue[0].ticket.done():
                    self._queue.popleft()
            if not isinstance(err, Exception):
                raise
        finally:
            self._running = ()


class _Wave:
    """One decode over the engine's places: opened on the queue's first request, then its `Joins` (`__call__`)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.places: list["tuple[_Request, int] | None"] = []  # (request, row) at each place (`run` opens them)
        self.blocked = False  # the queue's first request does not fit this wave: nothing more joins it
        self.joined = False  # a row has joined after the first step
        self.head: "_Request | None" = None  # the request the wave opened on
        self.grows = False  # whether the session may grow for a longer prompt (`run` says; `_join`: within memory)

    def requests(self) -> list[_Request]:
        return list({id(p[0]): p[0] for p in self.places if p is not None}.values())

    def run(self) -> None:
        engine = self.engine
        with engine._lock:
            while engine._queue and engine._queue[0].ticket.cancelled:
                engine._queue.popleft().ticket._end(error=Cancelled("the request was cancelled"))
            if not engine._queue:
                return
            head = self.head = engine._queue[0]
            self.room = max(r.room for r in engine._queue)  # room for every request waiting now
        method, B = engine.planned.method, engine.places(head, self.room)
        self.drafter = method.drafter(engine.layout)
        if not admits(self.drafter):  # (no row will join: no place past the head's rows)
            B = min(B, head.rows - head.next)
        self.places = [None] * B
        rows = list(range(head.next, min(head.rows, head.next + B)))
        copies = rows + [rows[-1]] * (B - len(rows))
        # where rows may leave the forwards (mmspec.adapters.rows: on a CPU, or eager), the session holds the head's
        # rows alone, as if the other places' rows had left, and a row that joins comes in as one that comes back (a
        # prefill of every place would cost a lone row in 16 places a third of its time on emoji-image); a compiled
        # step on an accelerator keeps every place, the places past the head's rows holding copies of its last
        # (and there a joining row's longer prompt may grow the session's cache: new tensors, which a compiled step
        # on an accelerator, holding the old ones, must not be given)
        self.grows = rows_may_leave(engine.compile, module_device(engine.target))
        held = rows if self.grows else copies
        condition, samples, session = self._open(head, held)
        if len(held) < B and not isinstance(session, Selects):  # (its rows cannot leave: it holds every place)
            held = copies
            condition, samples, session = self._open(head, held)
        device = session.device
        places = torch.arange(B)
        fixed = self._forced(head, copies)
        seeds = [head.seeds[r] for r in rows] + [0] * (B - len(rows))
        state = DecodeState(layout=engine.layout, max_window=self.room, vocab_size=engine.target.vocab_size,
                            sampling=engine.sampling, streams=Streams(seeds, engine.target.vocab_size, device),
                            seq=torch.full((B, engine.layout.length + self.room), -1, dtype=torch.long, device=device),
                            forced=fixed.to(device), row_ids=rows + [0] * (B - len(rows)))
        state.active[len(rows):] = False
        self._started(head, places[:len(rows)].tolist(), rows)
        # rows of other requests join before the first step where the drafter and session take them, and at any
        # step where a row's tokens are its seed's alone (`same_tokens`), or where no row has tokens given: elsewhere
        # a row that joins behind the others would run other windows than alone (a forced run's widened step is
        # taken only where every row is in one), so other tokens of the same law
        self.joins = admits(self.drafter) and isinstance(session, Takes)
        self.forced = head.fixed[rows[0]] >= 0  # [N] where tokens are forced (a joining row of a counter method must
        # have them where the wave's rows do)
        self.alike = engine.joins_rows and method.same_tokens  # any row may join: its tokens are its seed's alone
        self.anywhere = self.alike or (engine.joins_rows and not bool(self.forced.any()))
        prompt = None if session.prompt is None else session.prompt + session.prompt[-1:] * (B - len(held))
        context = Context(session=session, condition=condition, num_samples=samples, prompt=prompt,
                          draft_vocab=session.draft_vocab)
        stop = None if engine.stop_tokens is None else torch.as_tensor(engine.stop_tokens, device=device)
        try:
            decode(session, self.drafter, method.verifier, engine.planned.policy, state, context, stop,
                   self._on_commit, engine.compile, joins=self)
        finally:
            engine.waves, engine.forwards = engine.waves + 1, engine.forwards + state.step

    def _open(self, request: _Request, rows: list[int]):
        """(condition, samples, the target's session) of `rows` of `request`, prefilled."""
        engine = self.engine
        condition, samples = request.condition_of(rows)
        return condition, samples, engine.target.session(condition, engine.layout, cfg=engine.sampling.cfg,
                                                         num_samples=samples,
                                                         max_window=self.room + engine.planned.method.tree_nodes)

    def _forced(self, request: _Request, rows: list[int]) -> torch.Tensor:
        """[b, N + room] the forced tokens of `rows` of `request`, FREE past the layout (the last window's overhang)."""
        fixed = request.fixed[rows]
        return torch.cat([fixed, torch.full((len(rows), self.room), FREE, dtype=fixed.dtype)], 1)

    def _started(self, request: _Request, places: list[int], rows: list[int]) -> None:
        for place, row in zip(places, rows):
            self.places[place] = (request, row)
        request.next = rows[-1] + 1
        engine = self.engine
        with engine._lock:
            if request.next == request.rows and engine._queue and engine._queue[0] is request:
                engine._queue.popleft()
            engine._running = tuple(self.requests())

    @property
    def in_step(self) -> bool:
        """Whether the wave's rows may stay in step: none has joined after the first step (one that did starts behind
        the others, and in step they would wait for it)."""
        return not self.joined

    def __call__(self, wave: Wave) -> None:
        state = wave.state
        active = state.active.tolist()
        finished = []
        for place, held in enumerate(self.places):
            if held is None:
                continue
            request, row = held
            if request.ticket.done() or request.ticket.cancelled:  # ended (its hook failed) or cancelled: leaves
                request.ticket._end(error=Cancelled("the request was cancelled"))
                state.active[place], self.places[place] = False, None
            elif not active[place]:  # finished: handed over, a request's rows at once
                finished.append(place)
        N = state.length
        for request, places, rows in self._by_request(finished):
            at = torch.tensor(places, device=state.n.device)
            stats = wave.stats.rows(at, wave.commit_step[at, :N], 0.0)
            stats.committed[:] = state.n[at]
            request.done(rows, state.seq[at, :N], state.n[at], stats)
        for place in finished:
            self.places[place] = None
        if self.joins and (state.step == 0 or self.anywhere):
            self._join(wave)
        state.groups = self._groups()

    def _groups(self) -> "list[int] | None":
        """[B] the groups the window policy counts the places' tokens in (DecodeState.groups): while rows wait that
        may take places of this wave, each place alone (a row that finishes gives its place to one waiting, so the
        wave's throughput is its rows' mean advance); else None, one group (the wave is done when its last row is,
        and so is the last of its requests: the latency of the slowest, a demo's p95)."""
        if self.joins and self.anywhere and not self.blocked and self.engine._queue:
            return list(range(len(self.places)))
        return None

    def _join(self, wave: Wave) -> None:
        engine, state = self.engine, wave.state
        while not self.blocked:
            free = [p for p, held in enumerate(self.places) if held is None]
            with engine._lock:
                while engine._queue and engine._queue[0].ticket.cancelled:
                    engine._queue.popleft().ticket._end(error=Cancelled("the request was cancelled"))
                if not free or not engine._queue:
                    return
                request = engine._queue[0]
            if request.room > self.room:
                self.blocked = True
                return
            rows = list(range(request.next, min(request.rows, request.next + len(free))))
            if not self.alike and not ((request.fixed[rows] >= 0) == self.forced).all():
                self.blocked = True
                return
            condition, samples, session = self._open(request, rows)
            # a longer prompt grows the cache: a new one while the old is still held, within what a generation may
            # take of the memory free now (mmspec.memory)
            grow = int(SHARE * free_bytes(state.seq.device)) if self.grows else 0
            if not wave.session.takes(session, grow):
                self.blocked = True
                return
            places = torch.tensor(free[:len(rows)], device=state.seq.device)
            state.admit(places, self._forced(request, rows).to(state.seq.device), [request.seeds[r] for r in rows],
                        rows)
            wave.rows.follow(state.active, int(state.active.sum()), joined=True)
            wave.session.take(session, places)
            wave.stats.reset(places)
            wave.commit_step[places] = -1
            wave.drafter.admit(state, places, Context(session=session, condition=condition, num_samples=samples,
                                                      prompt=session.prompt, draft_vocab=session.draft_vocab))
            self._started(request, places.tolist(), rows)
            self.joined |= state.step > 0

    def _by_request(self, places: list[int]) -> "list[tuple[_Request, list[int], list[int]]]":
        """Places held -> each request holding some of them, with those places and its rows in them."""
        mine: dict[int, tuple[_Request, list[int], list[int]]] = {}
        for place in places:
            request, row = self.places[place]
            entry = mine.setdefault(id(request), (request, [], []))
            entry[1].append(place)
            entry[2].append(row)
        return list(mine.values())

    def _on_commit(self, state: DecodeState, k: torch.Tensor) -> None:
        """Each request's hook sees its own rows."""
        hooked = [p for p, held in enumerate(self.places) if held is not None and held[0].on_commit is not None]
        for request, places, rows in self._by_request(hooked):
            at = torch.tensor(places, device=k.device)
            try:
                request.on_commit(RequestRows(state, at, rows), k[at])
            except Exception as err:  # ends this request alone: its rows leave at the next step
                request.ticket._end(error=err)
                state.active[at] = False


class Engines:
    """The engines of one pipeline's calls, shared by the threads that make them (a demo's visitors, a server's
    workers): one per target, layout, plan, sampling, stop tokens and compile option, each with `slots` places (or
    as many rows as fit in memory, when fewer) and a thread of its own, so that calls made at once run as rows of
    one decode."""

    def __init__(self, slots: int):
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be an int >= 1, got {slots!r}")
        self.slots = slots
        self._engines: dict[tuple, Engine] = {}
        self._lock = threading.Lock()
        self._closed = False

    def get(self, target, layout: Layout, planned: Plan, sampling: Sampling, stop_tokens=None,
            compile: "bool | dict" = False) -> Engine:
        """The engine for a call with these options (made and started on first use)."""
        stop = None if stop_tokens is None else tuple(stop_tokens)
        key = (id(target), repr(layout), planned.key, repr(sampling), stop, repr(compile))
        with self._lock:
            if self._closed:
                raise RuntimeError("the engines are closed")
            engine = self._engines.get(key)
            if engine is None:
                engine = self._engines[key] = Engine(target, layout, planned, sampling, slots=self.slots,
                                                     stop_tokens=stop_tokens, compile=compile).start()
            return engine

    def close(self, cancel: bool = False) -> None:
        """Close every engine (Engine.close); later calls are refused."""
        with self._lock:
            engines, self._engines, self._closed = list(self._engines.values()), {}, True
        for engine in engines:
            engine.close(cancel)

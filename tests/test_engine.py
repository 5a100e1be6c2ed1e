"""The engine: rows join as rows leave, and every request's tokens are the ones it gets alone with its seed."""
import threading

import pytest
import torch

import mmspec
import mmspec.plan
from mmspec.adapters.base import PrefixSession
from mmspec.engine import Cancelled, Engine, Engines
from tiny import CycleWindow, chi_square_pvalue, gpt_law, llama_law, sequence_id, tiny_gpt, tiny_llama

SAMPLING = mmspec.Sampling(temperature=0.9, top_k=12, cfg_scale=2.5)
LAYOUT = mmspec.Grid2D(4, 4)


@pytest.fixture(scope="module")
def target():
    return mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, rope_axes=2, seed=0))


def _alone(target, condition, seed, num_outputs=1):
    return mmspec.generate(target, torch.tensor([condition]), LAYOUT, method="ar", sampling=SAMPLING, seed=seed,
                           num_outputs=num_outputs).tokens


def _requests(engine, arrivals, condition=lambda c: torch.tensor([c])):
    """Submit the first request, and each next one from the hook of the one before at its `arrivals` step: requests
    arrive while rows run. `condition`: an arrival's condition -> the request's."""
    tickets, wrap = [], condition

    def submit(i):
        condition, seed, outputs, at = arrivals[i]
        hook = None
        if i + 1 < len(arrivals):
            def hook(rows, k, i=i, fired=[]):
                if rows.step >= arrivals[i][3] and not fired:
                    fired.append(1)
                    submit(i + 1)
        tickets.append(engine.submit(wrap(condition), num_outputs=outputs, seed=seed, on_commit=hook))
    submit(0)
    engine.run_until_idle()
    return tickets


ARRIVALS = [(0, 3, 2, 2), (3, 11, 3, 1), (1, 7, 1, 4), (2, 5, 2, 0), (0, 9, 1, 0)]


@pytest.mark.parametrize("slots", [1, 2, 5])
@pytest.mark.parametrize("method", ["exact", {"name": "exact", "proactive": [3, 2]}])
def test_exact_requests_arriving_mid_run_equal_ar_alone(target, method, slots):
    engine = Engine(target, LAYOUT, mmspec.plan.plan(method, 5), SAMPLING, slots=slots)
    tickets = _requests(engine, ARRIVALS)
    assert len(tickets) == len(ARRIVALS)
    for ticket, (condition, seed, outputs, _) in zip(tickets, ARRIVALS):
        assert torch.equal(ticket.result().tokens, _alone(target, condition, seed, outputs))


def _counter_requests(target, method):
    """ARRIVALS through 2 places at window 5 -> (each request's tokens, its tokens alone, the engine's waves)."""
    engine = Engine(target, LAYOUT, mmspec.plan.plan(method, 5), SAMPLING, slots=2)
    tickets = _requests(engine, ARRIVALS)
    alone = [mmspec.generate(target, torch.tensor([c]), LAYOUT, method=method, window=5, sampling=SAMPLING, seed=s,
                             num_outputs=n).tokens for c, s, n, _ in ARRIVALS]
    return [t.result().tokens for t in tickets], alone, engine.waves


@pytest.mark.parametrize("method", ["coupled", "lookup", "jacobi"])
def test_counter_method_requests_arriving_mid_run_get_their_tokens_alone(target, method):
    """No token given: rows of methods drawing from a counter join running rows (one wave for all), each row with
    the tokens it gets alone at the same fixed window."""
    tokens, alone, waves = _counter_requests(target, method)
    assert waves == 1 and all(torch.equal(a, b) for a, b in zip(tokens, alone))


def test_a_joiner_that_goes_on_with_its_place_s_counter_is_caught(target, monkeypatch):
    """The wrong variant: a row joining mid-wave draws on from the counter of the row that left its place."""
    from mmspec.rng import Streams
    admit = Streams.admit

    def keeps_counter(self, rows, seeds):
        drawn = self._drawn[rows].clone()
        admit(self, rows, seeds)
        self._drawn[rows] = drawn
    monkeypatch.setattr(Streams, "admit", keeps_counter)
    tokens, alone, _ = _counter_requests(target, "coupled")
    assert not all(torch.equal(a, b) for a, b in zip(tokens, alone))


def test_a_wave_prefills_its_rows_alone_and_joiners_come_in_as_rows_that_come_back(target, monkeypatch):
    """On a CPU the wave's session holds the head's rows alone (no prefill of the places no row runs yet); rows that
    join grow it as rows that come back do, and every request keeps its tokens alone."""
    opened, session = [], target.session

    def counted(condition, *args, **kwargs):
        opened.append(session(condition, *args, **kwargs))
        opened[-1].rows_at_open = opened[-1].batch_size  # (rows leaving narrow it later)
        return opened[-1]

    monkeypatch.setattr(target, "session", counted)
    engine = Engine(target, LAYOUT, mmspec.plan.plan("exact", 4), SAMPLING, slots=8)
    tickets = _requests(engine, [(0, 3, 1, 2), (1, 4, 2, 1), (2, 5, 1, 0)])
    assert opened[0].rows_at_open == 1 and engine.waves == 1  # (then one session per joining request)
    for ticket, (condition, seed, outputs) in zip(tickets, [(0, 3, 1), (1, 4, 2), (2, 5, 1)]):
        assert torch.equal(ticket.result().tokens, _alone(target, condition, seed, outputs))


def test_auto_decides_for_the_rows_running_not_the_places(target):
    """A lone request in an engine of 8 places runs one row: its window is chosen as a one-row call's (the policy's
    margins and the memory's measurements of one row), not a batch of 8's; a request of 4 rows as 4 rows."""
    memory = mmspec.window.WindowMemory()
    engine = Engine(target, LAYOUT, mmspec.plan.plan("exact", mmspec.window.AutoWindow(max_window=8, memory=memory)),
                    SAMPLING, slots=8)
    engine.submit(torch.tensor([0]), seed=1)
    engine.run_until_idle()
    assert [rows for rows, *_ in memory.shapes] == [1]
    engine.submit(torch.tensor([0, 1]), num_outputs=2, seed=1)
    engine.run_until_idle()
    assert [rows for rows, *_ in memory.shapes] == [1, 4]


class Groups(mmspec.window.FixedWindow):
    """A fixed window that records the groups the engine counts each step's tokens in (DecodeState.groups)."""

    def __init__(self, window):
        super().__init__(window)
        self.seen = []

    def __call__(self, state):
        self.seen.append(None if state.groups is None else list(state.groups))
        return super().__call__(state)


def test_rows_count_alone_while_rows_wait_for_places_and_as_one_batch_once_none_does(target):
    """While rows wait for places, each place's tokens count alone (the engine's throughput is its rows' mean
    advance); once the last rows of the queue have started, the wave counts as one batch (it is done when its last
    row is); the policy decides for groups of that many rows."""
    policy = Groups(3)
    engine = Engine(target, LAYOUT, mmspec.plan.plan("exact", policy), SAMPLING, slots=2)
    first, second = engine.submit(torch.tensor([0]), num_outputs=3, seed=1), engine.submit(torch.tensor([1]), seed=2)
    engine.run_until_idle()
    first.result(), second.result()
    alone = [i for i, groups in enumerate(policy.seen) if groups == [0, 1]]
    assert alone and alone == list(range(len(alone)))  # the first steps, while rows wait
    assert len(policy.seen) > len(alone) and all(groups is None for groups in policy.seen[len(alone):])
    auto = mmspec.window.AutoWindow(max_window=4)
    state = type("State", (), dict(groups=[7, 7, 9, 9, 9], running=5, batch_size=8))()
    assert auto.grouped(state, auto.shape(state)) == 4 and auto.shape(state) == 8  # (powers of two)
    state.groups = None
    assert auto.grouped(state, 8) == 8


@pytest.mark.parametrize("method", ["exact", "coupled", "lookup", "jacobi", "ar"])
def test_rows_join_as_rows_leave_at_any_batch_size(target, method):
    """More rows than places: rows join mid-run; every method keeps each row's own tokens at a fixed window."""
    conditions = torch.tensor([0, 3, 1, 2])
    kw = dict(method=method, window=4, sampling=SAMPLING, seed=5, num_outputs=2)
    whole = mmspec.generate(target, conditions, LAYOUT, **kw)
    for batch in (1, 3, 5):
        seen = []
        parts = mmspec.generate(target, conditions, LAYOUT, batch_size=batch,
                                on_commit=lambda rows, k: seen.append(len(rows.row_ids)), **kw)
        assert torch.equal(parts.tokens, whole.tokens) and max(seen) <= batch


def test_a_slot_whose_cache_is_not_taken_on_reuse_is_caught(target, monkeypatch):
    """The wrong variant: a place that keeps its last row's prefill when a new row joins it."""
    monkeypatch.setattr(PrefixSession, "take", lambda self, other, places: None)
    engine = Engine(target, LAYOUT, mmspec.plan.plan("exact", 5), SAMPLING, slots=2)
    tickets = _requests(engine, ARRIVALS)
    assert any(not torch.equal(t.result().tokens, _alone(target, c, s, n)) for t, (c, s, n, _) in zip(tickets, ARRIVALS))


def test_cancelled_and_failing_requests_end_alone(target):
    engine = Engine(target, LAYOUT, mmspec.plan.plan("exact", 5), SAMPLING, slots=2)
    queued = engine.submit(torch.tensor([1]), seed=1)

    def boom(rows, k):
        raise RuntimeError("hook failed")
    failing = engine.submit(torch.tensor([2]), seed=2, on_commit=boom)
    fine = engine.submit(torch.tensor([3]), seed=3)
    queued.cancel()
    engine.run_until_idle()
    with pytest.raises(Cancelled):
        queued.result()
    with pytest.raises(RuntimeError, match="hook failed"):
        failing.result()
    assert torch.equal(fine.result().tokens, _alone(target, 3, 3))


def test_engines_shared_by_threads_give_each_call_its_own_tokens(target):
    engines = Engines(3)
    out = {}

    def call(condition, seed):
        out[condition] = mmspec.generate(target, torch.tensor([condition]), LAYOUT, method="exact", window=5,
                                         sampling=SAMPLING, seed=seed, num_outputs=2, engines=engines).tokens
    threads = [threading.Thread(target=call, args=(c, 10 + c)) for c in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engines.close()
    for c in range(4):
        assert torch.equal(out[c], _alone(target, c, 10 + c, 2))


def _two_requests_law(method, samples=10_000):
    """Two requests of 10,000 rows each through an engine of 300 places: class 0 alone, then class 1 with a token
    given at index 1; rows join as rows finish (mid-step where the method allows). -> (p-values of each request
    against its exact law, each request's rows that joined after their wave's first step)."""
    model = tiny_gpt(vocab_size=4, num_classes=2, block_size=4, dtype=torch.float32)
    target, layout = mmspec.ReferenceTarget(model), mmspec.Grid2D(2, 2)
    s = mmspec.Sampling(temperature=0.9, top_k=3, cfg_scale=1.5)
    engine = Engine(target, layout, mmspec.plan.plan(method, CycleWindow((4, 2, 1, 3))), s, slots=300)
    first_step: dict[tuple[int, int], int] = {}

    def seen(request):
        def hook(rows, k):
            for row in rows.row_ids:
                first_step.setdefault((request, row), rows.step)
        return hook
    a = engine.submit(torch.tensor([0]), num_outputs=samples, seed=0, on_commit=seen(0))
    b = engine.submit(torch.tensor([1]), num_outputs=samples, seed=10**6, given=torch.tensor([[-1, 2, -1, -1]]),
                      on_commit=seen(1))
    engine.run_until_idle()
    laws = gpt_law(model, 0, layout, s), gpt_law(model, 1, layout, s, given={1: 2})
    pvalues = [chi_square_pvalue(sequence_id(t.result().tokens, 4), law) for t, law in zip((a, b), laws)]
    return pvalues, [sum(step > 0 for (r, _), step in first_step.items() if r == request) for request in (0, 1)]


@pytest.mark.parametrize("method", ["exact", "ar", "coupled", "lookup", {"name": "exact", "proactive": [3, 2]}],
                         ids=str)
def test_requests_sharing_a_decode_keep_their_exact_laws(method):
    pvalues, (free, given) = _two_requests_law(method)
    assert min(pvalues) > 1e-3, pvalues
    # rows of `exact` and `ar` join beside running rows; those of counter methods too where no token is given, and
    # where some are only before a wave's first step (mmspec.engine)
    assert free > 1000 and (given > 1000) == mmspec.plan.plan(method, 4).method.same_tokens, (free, given)


def test_the_law_test_catches_a_place_that_keeps_its_last_row_s_cache(monkeypatch):
    monkeypatch.setattr(PrefixSession, "take", lambda self, other, places: None)
    pvalues, _ = _two_requests_law("exact")
    assert pvalues[1] < 1e-6  # class 1's rows ran on class 0's prefill


def _text_requests(model, places, arrivals, method="exact", window=2):
    """Text requests through an engine of `places` on a tiny Llama: the first is submitted, each next one from the
    hook of the one before at its step -> (the engine, each request's tokens)."""
    target = mmspec.HFCausalLM(model)
    engine = Engine(target, mmspec.Sequence1D(3), mmspec.plan.plan(method, window), TEXT_SAMPLING, slots=places)
    tickets = _requests(engine, arrivals, condition=lambda prompt: [prompt])
    return engine, [t.result().tokens for t in tickets]


TEXT_SAMPLING = mmspec.Sampling(temperature=0.9, top_k=4)
PROMPTS = [[1, 2], [1, 3, 4, 2, 4, 1, 3], [2], [1] + [3, 4] * 36]  # the last past the cache's first 64 slots


def test_a_longer_prompt_joins_a_running_wave_and_every_request_keeps_its_tokens_alone():
    """Prompts of different lengths (text, Janus, Emu3, Lumina): a request whose prompt is longer than the wave's
    joins it (the wave's rows are left-padded to it: their slots move, the cache grows), in one wave, and every
    request gets the tokens it gets alone."""
    model = tiny_llama(vocab=5, dtype=torch.float32)
    arrivals = [(prompt, 3 + i, 2, 1) for i, prompt in enumerate(PROMPTS)]
    engine, tokens = _text_requests(model, 3, arrivals)
    assert engine.waves == 1
    for got, (prompt, seed, outputs, _) in zip(tokens, arrivals):
        alone = mmspec.generate(mmspec.HFCausalLM(model), [prompt], mmspec.Sequence1D(3), method="ar",
                                sampling=TEXT_SAMPLING, seed=seed, num_outputs=outputs).tokens
        assert torch.equal(got, alone)


def test_where_the_session_may_not_grow_a_longer_prompt_waits_for_the_next_wave():
    """A compiled step on an accelerator holds the cache's tensors (it may grow by 0 bytes): there a longer prompt does
    not fit the wave; nor where its grown cache would not fit in the memory free."""
    target = mmspec.HFCausalLM(tiny_llama(vocab=5, dtype=torch.float32))
    short, very_long = (target.session([p], mmspec.Sequence1D(3), cfg=False, num_samples=1, max_window=2)
                        for p in (PROMPTS[0], PROMPTS[3]))
    grown = short.cache.nbytes(128)  # the longer prompt's cache: 73 + 3 + 2 slots, in 128
    assert short.cache.nbytes() == grown // 2 == 2 * 2 * 1 * 2 * 64 * 8 * 4  # (layers, k and v, rows, heads, D)
    assert very_long.takes(short) and not short.takes(very_long) and not short.takes(very_long, grow=grown - 1)
    assert short.takes(very_long, grow=grown)


def _text_law(samples=6_000):
    """Two requests of `samples` rows through as many places on a tiny Llama, `exact` at 2: a short prompt, then a
    longer one whose rows take the places of the first's as they finish (the wave's cache grows while the first's
    rows run) -> p-values of each against its exact law."""
    model = tiny_llama(vocab=5, dtype=torch.float32)
    arrivals = [(PROMPTS[0], 0, samples, 0), (PROMPTS[1], 10**6, samples, 0)]
    engine, tokens = _text_requests(model, samples, arrivals)
    assert engine.waves == 1
    laws = [llama_law(model, prompt, 3, TEXT_SAMPLING) for prompt, *_ in arrivals]
    return [chi_square_pvalue(sequence_id(t, 5), law) for t, law in zip(tokens, laws)]


def test_requests_of_different_prompt_lengths_sharing_a_decode_keep_their_exact_laws():
    assert min(_text_law()) > 1e-3


def test_the_law_test_catches_a_grown_cache_whose_rows_attend_to_their_new_padding(monkeypatch):
    from mmspec.cache import StaticKVCache
    shift = StaticKVCache.shift

    def padding_seen(self, d, slots):
        first = self.first.clone()
        shift(self, d, slots)
        self.first.copy_(first)
    monkeypatch.setattr(StaticKVCache, "shift", padding_seen)
    assert _text_law()[0] < 1e-6  # the short prompt's rows that ran on


def test_closing_with_cancel_ends_running_and_queued_requests_and_refuses_later_ones(target):
    engine = Engine(target, LAYOUT, mmspec.plan.plan("exact", 5), SAMPLING, slots=1)
    closing = []

    def close_at_step_2(rows, k):
        if rows.step == 2 and not closing:
            closing.append(threading.Thread(target=engine.close, kwargs={"cancel": True}))
            closing[0].start()
            closing[0].join()  # (run_until_idle's thread: close joins no thread of the engine's own)
    running = engine.submit(torch.tensor([1]), seed=1, on_commit=close_at_step_2)
    queued = engine.submit(torch.tensor([2]), seed=2)
    engine.run_until_idle()
    for ticket in (running, queued):
        with pytest.raises(Cancelled):
            ticket.result()
    with pytest.raises(RuntimeError, match="closed"):
        engine.submit(torch.tensor([3]))

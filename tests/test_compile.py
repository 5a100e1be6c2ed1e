"""compile=True: the verify step (target forward, p, verification, commit) traces whole, with fullgraph=True,
for every method; compiled it gives the same tokens, `exact` stays `ar`, and the laws hold.

Tracing is what these tests check for most methods (backend "eager": dynamo's graph, run eagerly), since a
graph break or a device read is what would make a compiled step fail or fall back; one test runs inductor's
generated code end to end, and the law tests run "aot_eager", whose functionalised graph replays every
in-place write (the cache, the committed tokens, the random streams' counters) the way inductor does.
"""
import dataclasses
import math
import re

import pytest
import torch

import mmspec
from mmspec.cache import StaticKVCache
from mmspec.executor import Faster
from mmspec.methods import REGISTRY
from mmspec.steps import CHAIN
from mmspec.verify import RejectionVerifier
from test_distribution import ALPHA, case
from tiny import chi_square_pvalue, sequence_id, tiny_gpt, tiny_head

SAMPLING = mmspec.Sampling(temperature=0.9, top_k=12, cfg_scale=2.5)
SAMPLING_TEXT = mmspec.Sampling(temperature=0.9, top_k=12)  # (text models here have no null condition)
LAYOUT = mmspec.Grid2D(3, 4, row_end_token=15)  # structural tokens: forced drafts and p, widened windows
# every registered method (eagle, by name, with a tiny head: see _method), and variants of their options
METHODS = list(REGISTRY) + [{"name": "exact", "proactive": [3, 2]}, {"name": "draft-model", "proactive": [3, 2]},
                            {"name": "eagle", "exact": True, "jacobi": 2}, {"name": "eagle", "proactive": [3, 2]},
                            {"name": "eagle", "tree": [6, 3]}]


class AlwaysCompiled(Faster):
    def compiled(self, key):
        return True


@pytest.fixture(autouse=True)
def every_step_compiled(monkeypatch):
    """Every step compiled, as on an accelerator (on a CPU the `Executor` times eager steps against compiled ones and
    runs the faster: the tests of that choice set it up themselves)."""
    monkeypatch.setattr(mmspec.executor, "Faster", AlwaysCompiled)


def _target(seed=0):
    return mmspec.ReferenceTarget(tiny_gpt(vocab_size=16, n_layer=1, seed=seed))


def _method(method):
    method = {"name": method} if method in ("draft-model", "eagle") else method  # (their resources given here)
    if isinstance(method, dict) and method["name"] == "draft-model":
        return {**method, "model": _target(seed=3)}
    if isinstance(method, dict) and method["name"] == "eagle":  # the target forward inside the step keeps its features
        return {**method, "head": tiny_head(16, 24, layers=(0, 1), rope_axes=2, seed=3, dtype=torch.float64)}
    return method


def _run(method, compile=False, layout=LAYOUT, window=5):
    return mmspec.generate(_target(), torch.tensor([0, 3]), layout, method=_method(method), window=window,
                           sampling=SAMPLING, seed=0, num_samples=2, compile=compile)


@pytest.mark.parametrize("method", METHODS, ids=str)
def test_every_methods_step_traces_whole_and_gives_the_same_tokens(method):
    eager, traced = _run(method), _run(method, compile={"backend": "eager"})
    assert torch.equal(traced.tokens, eager.tokens)
    assert torch.equal(traced.stats.nfe, eager.stats.nfe)
    assert torch.equal(traced.stats.commit_step, eager.stats.commit_step)


class CudaGraphCheck:
    """A backend that asks of each graph what inductor's CUDA graphs ask before they run one: every input the graph
    writes in place is static (else "skipping cudagraphs due to mutated inputs": every kernel launched eagerly); and
    records the static inputs' addresses at each call (one that moved would re-record the graph at every step)."""

    def __init__(self):
        from torch._dynamo.backends.common import aot_autograd

        self.written_not_static: list[list[int]] = []
        self.addresses: list[set[tuple[int, ...]]] = []  # per graph, the static inputs' addresses of each call
        self.backend = aot_autograd(fw_compiler=self._compile)

    def _compile(self, gm, example_inputs):
        meta = torch._guards.TracingContext.try_get().fw_metadata
        static = list(meta.static_input_indices)
        self.written_not_static.append([i for i in meta.mutated_inp_runtime_indices if i not in static])
        seen = set()
        self.addresses.append(seen)

        def run(*args):
            seen.add(tuple(args[i].data_ptr() for i in static))
            return gm.forward(*args)
        return run


@pytest.mark.parametrize("method", METHODS, ids=str)
def test_a_compiled_step_writes_only_static_inputs_for_cuda_graphs(method):
    check = CudaGraphCheck()
    _run(method, compile={"backend": check.backend})
    assert check.written_not_static and not any(check.written_not_static), \
        f"inputs written but not static (CUDA graphs would be skipped): {check.written_not_static}"
    assert all(len(seen) == 1 for seen in check.addresses), "a static input moved between the steps"


def _tensors(obj, path: str, out: dict, seen: set) -> dict:
    """Every tensor reachable from `obj` through mmspec's objects, lists, tuples and dicts, by its path."""
    if id(obj) in seen:
        return out
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        out[path] = obj
    elif isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            _tensors(x, f"{path}[{i}]", out, seen)
    elif isinstance(obj, dict):
        for key, x in obj.items():
            _tensors(x, f"{path}[{key!r}]", out, seen)
    elif type(obj).__module__.startswith("mmspec") and hasattr(obj, "__dict__"):
        for key, x in vars(obj).items():
            _tensors(x, f"{path}.{key}", out, seen)
    return out


def _rebound_by_compiled_steps(method, monkeypatch) -> set[str]:
    """The tensors of the state and the step that a compiled step replaced by new ones (its outputs)."""
    rebound, run = set(), mmspec.executor.Executor.__call__

    def watched(self, state, draft, window):
        if self.rows is not None and not self.rows.all:  # (rows have left: the steps run eager)
            return run(self, state, draft, window)
        before = _tensors((state, self.step), "", {}, set())
        out = run(self, state, draft, window)
        after = _tensors((state, self.step), "", {}, set())
        rebound.update(path for path, t in after.items() if before.get(path, t) is not t)
        return out

    monkeypatch.setattr(mmspec.executor.Executor, "__call__", watched)
    torch._dynamo.reset()  # graphs an earlier test traced (a patched `advance` may not be guarded) are not reused
    _run(method, compile={"backend": "aot_eager"})
    return rebound


@pytest.mark.parametrize("method", METHODS, ids=str)
def test_what_a_compiled_step_changes_keeps_its_address(method, monkeypatch):
    """CUDA graphs replay into the memory of their outputs: a length, counter or cache kept as a step's new output
    (`x = f(x)`) is overwritten by the next replay (on an H200: "accessing tensor output of CUDAGraphs that has been
    overwritten by a subsequent run"). Everything the step changes and keeps changes in place; its outputs for the
    drafter (p, the verdict, a head's target features) are read before the next step (the stale-outputs test)."""
    assert not {path for path in _rebound_by_compiled_steps(method, monkeypatch) if not path.endswith(".features")}


def test_the_address_check_sees_a_cache_length_kept_as_a_new_tensor(monkeypatch):
    def rebinds(self, slots):
        self.lengths = slots[:, -1] + 1

    monkeypatch.setattr(StaticKVCache, "advance", rebinds)
    assert any(path.endswith("cache.lengths") for path in _rebound_by_compiled_steps("exact", monkeypatch))


class ReadsTheDevice(RejectionVerifier):
    """Wrong for a compiled step: decides on a value read back from the device."""

    def __call__(self, state, draft, logp, L):
        if logp.max() > 0:
            raise AssertionError("log p is never positive")
        return super().__call__(state, draft, logp, L)


def test_a_step_that_reads_the_device_is_an_error_not_a_silent_slowdown():
    wrong = dataclasses.replace(mmspec.methods.coupled(), verifier=ReadsTheDevice())
    assert torch.equal(_run(wrong).tokens, _run("coupled").tokens)  # eager, it runs
    with pytest.raises(Exception, match="(?i)graph break|data-dependent|fullgraph"):
        _run(wrong, compile={"backend": "eager"})


def test_compiled_exact_equals_ar_with_inductor(monkeypatch):
    """And inductor writes the KV cache where it lies. Written through views made outside the graph (inputs aliasing
    the cache), or views of one tensor of every layer, it copied each layer's whole cache into a buffer and back at
    every write: at 8 rows of emoji-image 5.8 ms of a 6.7 ms compiled AR step on a CPU."""
    from torch._inductor.utils import run_and_get_code

    caches = []
    init = StaticKVCache.__init__
    monkeypatch.setattr(StaticKVCache, "__init__",
                        lambda self, *a, **k: (init(self, *a, **k), caches.append(self.k[0].numel()))[0])
    layout = mmspec.Grid2D(4, 4)
    ar = _run("ar", layout=layout)
    with torch._inductor.config.patch(force_disable_caches=True):  # (code read from a cache is not shown)
        got, code = run_and_get_code(lambda: _run("exact", compile=True, layout=layout, window=4))
    assert torch.equal(got.tokens, ar.tokens)
    assert got.stats.nfe.sum() < ar.stats.nfe.sum()
    layer = caches[-1]  # a layer's cache as the compiled steps saw it (rows that are done leave it later)
    shapes = re.findall(r"empty_strided_\w+\(\(([\d, ]+)\)", "\n".join(code))  # every buffer the graphs allocate
    buffers = [math.prod(int(n) for n in shape.split(",") if n.strip()) for shape in shapes]
    assert buffers and max(buffers) < layer, f"a buffer of {max(buffers)} values: a copy of a layer's cache ({layer})"


@pytest.mark.parametrize("method", ["coupled", "pac", "exact", "eagle"], ids=str)
def test_compiled_methods_match_the_exact_law(method):
    target, _, layout, sampling, law = case("gpt-grid")
    if method == "eagle":  # the head reads the features the compiled forward kept (functionalised by aot_eager)
        method = {"name": "eagle", "head": tiny_head(4, 24, rope_axes=2, seed=3)}
    g = mmspec.generate(target, torch.tensor([0]), layout, method=method, window=4, sampling=sampling, seed=0,
                        num_samples=20_000, compile={"backend": "aot_eager"})
    pvalue = chi_square_pvalue(sequence_id(g.tokens, target.vocab_size), law)
    assert pvalue > ALPHA, f"compiled {method}: chi-square p = {pvalue:.2e}"


def test_the_compiled_law_test_has_power_against_a_stream_that_repeats_its_draws(monkeypatch):
    """If the compiled step dropped the random streams' counter update (a side effect outside the graph's
    tensors), every step would reuse the same uniforms: the law test must see it."""
    from mmspec.rng import Streams

    draw = Streams.uniform

    def repeating(self, *shape):
        drawn = self._drawn.clone()
        u = draw(self, *shape)
        self._drawn.copy_(drawn)  # the counter never moves
        return u

    monkeypatch.setattr(Streams, "uniform", repeating)
    target, _, layout, sampling, law = case("gpt-grid")
    g = mmspec.generate(target, torch.tensor([0]), layout, method="coupled", window=4, sampling=sampling, seed=0,
                        num_samples=20_000, compile={"backend": "aot_eager"})
    assert chi_square_pvalue(sequence_id(g.tokens, target.vocab_size), law) < ALPHA


class ShortChains:
    """A drafter whose chains are shorter than the window asked for, by a length fixed before anything is drawn
    (`lengths` by step, at most the window's drafts): what a compiled step pads to a few L. Its drafts come from
    a fixed law q, stored with them, so the rejection verifier keeps p's law."""

    makes = frozenset({CHAIN})

    def __init__(self, vocab_size: int, lengths=(2,)):
        weights = torch.linspace(1.0, 2.0, vocab_size)
        self.q = weights / weights.sum()  # [V]
        self.lengths = lengths

    def start(self, state, context):
        pass

    def propose(self, state, window):
        W = min(self.lengths[state.step % len(self.lengths)], window.D)
        q = self.q.expand(state.batch_size, W, -1).contiguous()  # [B, W, V]
        tokens = mmspec.sampling.sample_from(q, state.streams.uniform(W).to(q.device))
        return mmspec.steps.Draft(tokens, q, torch.zeros_like(tokens, dtype=torch.bool))

    def update(self, state, draft, verdict, logp, k):
        pass


def _short_chains(vocab_size, lengths=(2,)):
    return mmspec.methods.Method("short-chains", lambda layout: ShortChains(vocab_size, lengths), RejectionVerifier())


class StaleOutputs:
    """A backend that treats a step's outputs as CUDA graphs do: memory of the graph's pool, which the next replay
    may reuse. Each call overwrites the previous call's outputs (those not in an input's memory) with garbage: NaN,
    -2**40, flipped booleans. Whatever still reads them after the next step then goes wrong."""

    def __init__(self):
        from torch._dynamo.backends.common import aot_autograd

        self.backend = aot_autograd(fw_compiler=self._compile)
        self.previous: list[torch.Tensor] = []
        self.poisoned = 0

    def _compile(self, gm, example_inputs):
        def run(*args):
            out = gm.forward(*args)
            inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
            for t in self.previous:
                if t.untyped_storage().data_ptr() not in inputs:  # (an input's memory is no pool's)
                    self.poisoned += 1
                    if t.is_floating_point():
                        t.fill_(float("nan"))
                    elif t.dtype == torch.bool:
                        t.logical_not_()
                    else:
                        t.fill_(-(2**40))
            self.previous = [o for o in out if isinstance(o, torch.Tensor)
                             and o.untyped_storage().data_ptr() not in inputs]
            return out
        return run


@pytest.mark.parametrize("method", METHODS, ids=str)
def test_nothing_reads_a_steps_outputs_after_the_next_step(method):
    """Under CUDA graphs the next replay may overwrite a step's outputs (p, the verdict, the new lengths): the loop,
    drafters and policies must have read or copied them by then."""
    check = StaleOutputs()
    got = _run(method, compile={"backend": check.backend})
    assert check.poisoned > 0
    assert torch.equal(got.tokens, _run(method).tokens)


class ReadsLastStepsP(ShortChains):
    """Wrong under CUDA graphs: keeps a step's p (a view of its output) and reads it after the next step."""

    kept = None

    def update(self, state, draft, verdict, logp, k):
        if self.kept is not None:  # the step before's p, read after this step ran
            q = self.kept[0, 0].exp() + 0.1
            self.q = q / q.sum()
        self.kept = logp


def test_the_stale_output_check_sees_a_drafter_that_reads_last_steps_p():
    wrong = mmspec.methods.Method("reads-last-p", lambda layout: ReadsLastStepsP(16), RejectionVerifier())
    eager = _run(wrong)
    try:
        stale = _run(wrong, compile={"backend": StaleOutputs().backend}).tokens
    except (RuntimeError, ValueError, IndexError):  # (a NaN law may draw a token past the vocabulary: caught too)
        return
    assert not torch.equal(stale, eager.tokens)


def test_a_compiled_step_meets_a_few_widths_when_chains_are_short():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    target, layout = _target(), mmspec.Grid2D(5, 8)
    g = mmspec.generate(target, torch.tensor([0, 3]), layout, method=_short_chains(16, lengths=range(8)), window=8,
                        sampling=SAMPLING, seed=0, compile={"backend": "eager"})
    assert (g.tokens >= 0).all()
    # chains of 0 .. 7 drafts: windows of 1 .. 8, verified at 1, 2, 4 and 8 (unpadded: eight graphs)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 4


@pytest.mark.parametrize("wrong", [False, True], ids=["padded", "a filler that claims a law"])
def test_a_padded_chain_keeps_the_law(monkeypatch, wrong):
    """Padded to the window asked for, a chain of 2 drafts in a window of 4 commits no more than 3 tokens, the last
    p's whether its filler passed or not. A filler that claims to be drawn from a law it was not drawn from (uniform
    here; it is its own token) biases that last token: the test must see it."""
    import mmspec.executor as executor
    padded = []
    pad = executor._padded

    def counted(draft, W):
        out = pad(draft, W)
        padded.append(W - draft.slots)
        if wrong:
            V = draft.q.shape[-1]
            q = torch.cat([draft.q, torch.full((draft.q.shape[0], W - draft.slots, V), 1.0 / V)], 1)
            out = mmspec.steps.Draft(out.tokens, q, torch.zeros_like(out.onehot))
        return out

    monkeypatch.setattr(executor, "_padded", counted)
    target, _, layout, sampling, law = case("gpt-grid")
    g = mmspec.generate(target, torch.tensor([0]), layout, method=_short_chains(target.vocab_size), window=4,
                        sampling=sampling, seed=0, num_samples=20_000, compile={"backend": "aot_eager"})
    assert sum(padded) > 0
    assert (g.stats.nfe >= 2).all()  # no step commits past its 2 drafts and the token after them: 3 of the 4
    pvalue = chi_square_pvalue(sequence_id(g.tokens, target.vocab_size), law)
    assert (pvalue < ALPHA) if wrong else (pvalue > ALPHA), f"chi-square p = {pvalue:.2e}"


def test_prompts_of_other_lengths_reuse_the_compiled_steps():
    """A compiled step's shapes are the cache's, not the prompt's: a text prompt a token longer compiles nothing
    afresh (it did every L, ten minutes of inductor for eagle on code-text)."""
    from mmspec.adapters.text import HFCausalLM
    from tiny import tiny_llama

    target = HFCausalLM(tiny_llama(dtype=torch.float32))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    graphs = []
    for prompt in ([1, 5, 7], [1, 3, 9, 9, 2], [4] * 11):
        g = mmspec.generate(target, [prompt], mmspec.Sequence1D(12), method="exact", window=4, sampling=SAMPLING_TEXT,
                            seed=0, compile={"backend": "eager"})
        assert (g.tokens >= 0).all()
        graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    assert graphs[0] > 0 and graphs[1] == graphs[2] == graphs[0], graphs



@pytest.mark.parametrize("compiled_s, eager_s, expected", [(1.0, 2.0, True), (2.0, 1.0, False)],
                         ids=["compiled faster", "eager faster"])
def test_on_a_cpu_the_faster_of_compiled_and_eager_runs(compiled_s, eager_s, expected):
    faster, key, ran = Faster(trial=3), (16, "draft"), []
    for step in range(12):
        compiled = faster.compiled(key)
        ran.append(compiled)
        seconds = 30.0 if compiled and step == 0 else compiled_s if compiled else eager_s  # the first call compiles
        faster.record(key, compiled, seconds)
    assert ran[:7] == [True] * 4 + [False] * 3  # the compiling call and 3 timed, then 3 eager
    assert ran[7:] == [expected] * 5
    assert faster.compiled((1, "draft"))  # another kind of step starts its own trial, compiled


def test_a_compiled_generation_that_mixes_eager_steps_keeps_exact_equal_to_ar(monkeypatch):
    """Where eager is faster (timed on the CPU), steps run eager between compiled ones: the same tokens."""
    import mmspec.executor as executor

    ran = []

    class Alternating(Faster):  # compiled, eager, compiled, ...
        def compiled(self, key):
            ran.append(len(ran) % 2 == 0)
            return ran[-1]

    monkeypatch.setattr(executor, "Faster", Alternating)
    got = _run("exact", compile={"backend": "aot_eager"})
    assert torch.equal(got.tokens, _run("ar").tokens)
    assert True in ran and False in ran


def test_on_a_cpu_rows_that_are_done_leave_and_the_steps_after_run_eager():
    """A compiled step is made for the whole batch: once a row is done (and leaves the forwards, as eager) the
    steps run eager, none compiled for a smaller batch; the tokens are eager's."""
    compiled_calls = []

    def counting(gm, example_inputs):
        return lambda *args: (compiled_calls.append(1), gm(*args))[1]

    got = _run("exact", compile={"backend": counting})
    first_done, last = int(got.stats.nfe.min()), int(got.stats.nfe.max())
    assert first_done < last  # rows finished apart
    assert len(compiled_calls) == first_done  # every step while all rows ran, none after
    assert torch.equal(got.tokens, _run("exact").tokens)

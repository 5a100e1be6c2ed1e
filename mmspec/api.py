"""`mmspec.generate`: the one entry point to speculative decoding over any layout."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch

from mmspec.adapters.base import Target
from mmspec.arguments import check_arguments
from mmspec.engine import Engine
from mmspec.layouts import Layout
from mmspec.loop import decode
from mmspec.memory import row_bytes, rows_at_once
from mmspec.methods import DEFAULT_METHOD, DEFAULT_WINDOW, Method
from mmspec.options import NUM_OUTPUTS, one_of
from mmspec.plan import Plan, plan
from mmspec.request import Generation, check_given, count, forced, forced_rows, row_seeds
from mmspec.rng import Streams
from mmspec.sampling import Sampling
from mmspec.state import DecodeState
from mmspec.steps import Context
from mmspec.threads import module_device, scoped
from mmspec.window import WindowPolicy

if TYPE_CHECKING:
    from mmspec.engine import Engines


@scoped(lambda target, *args, **kwargs: module_device(target))
def generate(target: Target, condition: Any, layout: Layout, *, method: "str | dict | Method" = DEFAULT_METHOD,
             window: "int | str | WindowPolicy" = DEFAULT_WINDOW, sampling: "Sampling | dict | None" = None,
             seed: "int | Sequence[int]" = 0,
             num_outputs: "int | None" = None, stop_tokens: "Sequence[int] | None" = None,
             on_commit: "Callable[[DecodeState, torch.Tensor], None] | None" = None,
             given: "torch.Tensor | None" = None, compile: "bool | dict" = False,
             batch_size: "int | None" = None, num_samples: "int | None" = None,
             planned: "Plan | None" = None, engines: "Engines | None" = None) -> Generation:
    """Generate `num_outputs` token sequences per condition (default 1), losslessly, with speculation.

    target: a Target (e.g. `ReferenceTarget(gpt)`); condition: what the target is conditioned on
    (class ids [C], prompt ids [C, P]...); layout: Sequence1D / Grid2D / Grid3D; method: a name,
    {'name': ..., options} or a Method;
    window: positions verified per target forward (1..256), "auto" (AutoWindow) or a window policy that picks
    L at every step;
    sampling: Sampling or a dict of its fields; seed: an int (output j of each condition gets seed + j, whatever
    the other conditions: the pipelines' rule, so that a prompt and seed give the same output in any batch) or one
    seed per row. Rows are ordered condition-major: row i is sample i % num_outputs of condition i // num_outputs
    (`num_samples` is num_outputs's old name, until 0.2).
    stop_tokens end a row when committed (kept as its last token); on_commit(state, k) is called after
    every forward with the k [B] new tokens per row (streaming; it may end rows with state.finish).
    given: [R, N] tokens fixed in advance (-1 = generate), per row (R = B), per condition (R = C, the same
    for its samples) or for all (R = 1): a first frame, a known image region, a text prefix. They are
    committed as they are, never drafted or counted as accepted, and the model sees them as context: the
    output law is plain AR sampling that writes each given token instead of sampling it. A run of given (or
    structural) tokens filling the window is taken whole, with the token after it, in one forward.
    compile: True compiles the step after the drafts (target forward, p, verification, commit) with
    torch.compile, one graph per L (`fullgraph=True`; CUDA graphs on a GPU); a dict is passed to
    torch.compile as keyword arguments. The tokens are the same as without it. On a CPU each kind of step is timed
    compiled and eager and the faster runs, and once a row is done the steps run eager (mmspec.executor).
    batch_size: rows run at a time (None: as many as fit). The memory a row needs (KV cache, logits, drafts, CFG's
    copies) is estimated before any work for a target that gives its sizes (mmspec.memory.Sized), and rows run in
    batches that fit in half the memory free (mmspec.memory);
    a batch_size that does not fit, or a row that does not, is refused. Rows run on an engine (mmspec.engine) with
    that many places, a row joining as another finishes; they are the same in any batch.
    engines: mmspec.engine.Engines shared with other calls (other threads): calls with the same options run as rows
    of one decode (batch_size: the engines' slots).
    On a CPU the call runs on no more threads than the cores other work leaves free, and restores the caller's
    count after; threads the caller chose (torch.set_num_threads, OMP_NUM_THREADS) are kept (mmspec.threads).
    """
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a Sequence1D, Grid2D or Grid3D, not {type(layout).__name__}")
    check_arguments(on_commit=on_commit, compile=compile)
    if planned is not None and (method is not DEFAULT_METHOD or window is not DEFAULT_WINDOW):
        raise ValueError("mmspec.generate takes a plan or a method and window, not both")
    planned = planned or plan(method, window)
    num_samples = one_of(num_outputs, num_samples, "num_samples", "mmspec.generate", NUM_OUTPUTS)
    if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
        raise ValueError(f"num_outputs must be >= 1, got {num_samples}")
    sampling = Sampling.coerce(sampling)
    if given is not None:
        given = check_given(given, layout, target.vocab_size)
    fixed = forced(layout, given)  # [R, N]
    room = planned.room(fixed)
    conditions = count(condition)
    if conditions is None:  # (a condition whose rows this cannot tell: one batch, as asked)
        return _run(target, condition, layout, method=planned.method, policy=planned.policy, sampling=sampling,
                    room=room, seed=seed, num_samples=num_samples, given=given, stop_tokens=stop_tokens,
                    on_commit=on_commit, compile=compile)
    B = conditions * num_samples
    seeds = row_seeds(seed, B, num_samples)
    forced_rows(fixed, B, num_samples, 0)  # given rows that fit none of the forms are refused here, before any work
    request = dict(num_outputs=num_samples, seed=seeds, given=given, on_commit=on_commit)
    # the cache holds a window's chain and its proactive branches; a call whose rows do not fit is refused here
    per_row = row_bytes(target, condition, layout, sampling.cfg, room + planned.method.tree_nodes)
    at_once = rows_at_once(per_row, B, module_device(target), batch_size)
    if engines is not None:  # shared with other calls (threads) of the same options: their rows run together
        engine = engines.get(target, layout, planned, sampling, stop_tokens, compile)
        return engine.submit(condition, **request).result()
    engine = Engine(target, layout, planned, sampling, slots=min(at_once, B), stop_tokens=stop_tokens, compile=compile)
    ticket = engine.submit(condition, **request)
    engine.run_until_idle()
    return ticket.result()


def row_need(target: Target, condition: Any, layout: Layout, *, method: "str | dict | Method" = DEFAULT_METHOD,
             window: "int | str | WindowPolicy" = DEFAULT_WINDOW, sampling: "Sampling | dict | None" = None,
             given: "torch.Tensor | None" = None, planned: "Plan | None" = None) -> "int | None":
    """Bytes one row of `generate(target, condition, layout, ...)` with these options needs at most, as generate
    estimates it before any work (None: a target that gives no sizes); `given` may hold any token where one is given
    (only where counts)."""
    planned, sampling = planned or plan(method, window), Sampling.coerce(sampling)
    room = planned.room(forced(layout, given))
    return row_bytes(target, condition, layout, sampling.cfg, room + planned.method.tree_nodes)


def _run(target, condition, layout, *, method, policy, sampling, room, seed, num_samples, given, stop_tokens, on_commit,
         compile) -> Generation:
    """A condition whose rows `count` cannot tell, in one batch as the target's session reads it."""
    fixed = forced(layout, given)  # [R, N]
    drafter = method.drafter(layout)  # (a drafter whose drafts its verifier cannot read fails here, before any work)
    session = target.session(condition, layout, cfg=sampling.cfg, num_samples=num_samples,
                             max_window=room + method.tree_nodes)
    B, device = session.batch_size, session.device
    seeds = row_seeds(seed, B, num_samples)
    N = layout.length
    state = DecodeState(
        layout=layout, max_window=room, vocab_size=target.vocab_size, sampling=sampling,
        streams=Streams(seeds, target.vocab_size, device),
        seq=torch.full((B, N + room), -1, dtype=torch.long, device=device),
        forced=forced_rows(fixed, B, num_samples, room).to(device))
    context = Context(session=session, condition=condition, num_samples=num_samples, prompt=session.prompt,
                      draft_vocab=session.draft_vocab)
    stop = None if stop_tokens is None else torch.as_tensor(list(stop_tokens), device=device)
    stats = decode(session, drafter, method.verifier, policy, state, context, stop, on_commit, compile)
    tokens = state.seq[:, :N].masked_fill(torch.arange(N, device=device) >= state.n[:, None], -1)
    return Generation(tokens, state.n.clone(), stats)

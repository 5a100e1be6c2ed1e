"""`mmspec.generate`: the one entry point to speculative decoding over any layout."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from mmspec.adapters.base import Target
from mmspec.arguments import check_arguments, seed_list
from mmspec.layouts import FREE, Layout
from mmspec.loop import decode
from mmspec.memory import row_bytes, rows_at_once
from mmspec.methods import DEFAULT_METHOD, DEFAULT_WINDOW, Method
from mmspec.options import NUM_OUTPUTS, one_of
from mmspec.plan import Plan, plan
from mmspec.rng import MAX_SEED, Streams
from mmspec.sampling import Sampling
from mmspec.state import DecodeState
from mmspec.stats import Stats
from mmspec.steps import Context
from mmspec.threads import module_device, scoped
from mmspec.window import WindowPolicy


@dataclass
class Generation:
    tokens: torch.Tensor  # [B, N] generated tokens, -1 after a row stopped early
    lengths: torch.Tensor  # [B] tokens generated per row
    stats: Stats


@scoped(lambda target, *args, **kwargs: module_device(target))
def generate(target: Target, condition: Any, layout: Layout, *, method: "str | dict | Method" = DEFAULT_METHOD,
             window: "int | str | WindowPolicy" = DEFAULT_WINDOW, sampling: "Sampling | dict | None" = None,
             seed: "int | Sequence[int]" = 0,
             num_outputs: "int | None" = None, stop_tokens: "Sequence[int] | None" = None,
             on_commit: "Callable[[DecodeState, torch.Tensor], None] | None" = None,
             given: "torch.Tensor | None" = None, compile: "bool | dict" = False,
             batch_size: "int | None" = None, num_samples: "int | None" = None,
             planned: "Plan | None" = None) -> Generation:
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
    torch.compile, one graph per window width (`fullgraph=True`; CUDA graphs on a GPU); a dict is passed to
    torch.compile as keyword arguments. The tokens are the same as without it. On a CPU each kind of step is timed
    compiled and eager and the faster runs, and once a row is done the steps run eager (mmspec.executor).
    batch_size: rows run at a time (None: as many as fit). The memory a row needs (KV cache, logits, drafts, CFG's
    copies) is estimated before any work for a target that gives its sizes (mmspec.memory.Sized), and rows run in
    batches that fit in half the memory free (mmspec.memory);
    a batch_size that does not fit, or a row that does not, is refused. Rows are the same in any batch.
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
        given = _check_given(given, layout, target.vocab_size)
    fixed = _forced(layout, given)  # [R, N]
    room = planned.room(fixed)
    run = dict(method=planned.method, policy=planned.policy, sampling=sampling, room=room, stop_tokens=stop_tokens,
               on_commit=on_commit, compile=compile)
    conditions = _count(condition)
    if conditions is None:  # (a condition whose rows this cannot tell: run as asked)
        return _run(target, condition, layout, seed=seed, num_samples=num_samples, given=given, **run)
    B = conditions * num_samples
    seeds = row_seeds(seed, B, num_samples)
    _rows(fixed, B, num_samples, 0)  # given rows that fit none of the forms are refused here, before any work
    # the cache holds a window's chain and its proactive branches
    per_row = row_bytes(target, condition, layout, sampling.cfg, room + planned.method.tree_nodes)
    at_once = rows_at_once(per_row, B, module_device(target), batch_size)
    if at_once >= B:
        return _run(target, condition, layout, seed=seeds, num_samples=num_samples, given=given, **run)
    parts = []
    for first in range(0, B, at_once):  # rows are condition-major: each part's rows one by one, with their seeds
        rows = torch.arange(first, min(first + at_once, B))
        samples = 1 if condition is not None else len(rows)  # (no condition: a part's rows are its samples)
        parts.append(_run(target, _take(condition, rows // num_samples), layout, seed=seeds[first:first + at_once],
                          num_samples=samples, given=_given_rows(given, rows, B, num_samples), first_row=first, **run))
    return Generation(torch.cat([p.tokens for p in parts]), torch.cat([p.lengths for p in parts]),
                      Stats.cat([p.stats for p in parts]))


def row_need(target: Target, condition: Any, layout: Layout, *, method: "str | dict | Method" = DEFAULT_METHOD,
             window: "int | str | WindowPolicy" = DEFAULT_WINDOW, sampling: "Sampling | dict | None" = None,
             given: "torch.Tensor | None" = None, planned: "Plan | None" = None) -> "int | None":
    """Bytes one row of `generate(target, condition, layout, ...)` with these options needs at most, as generate
    estimates it before any work (None: a target that gives no sizes); `given` may hold any token where one is given
    (only where counts)."""
    planned, sampling = planned or plan(method, window), Sampling.coerce(sampling)
    room = planned.room(_forced(layout, given))
    return row_bytes(target, condition, layout, sampling.cfg, room + planned.method.tree_nodes)


def _run(target, condition, layout, *, method, policy, sampling, room, seed, num_samples, given, stop_tokens, on_commit,
         compile, first_row: int = 0) -> Generation:
    """One batch of `generate`; `first_row`: the index of its first row in the whole request (on_commit hooks read
    it from the state)."""
    fixed = _forced(layout, given)  # [R, N]
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
        forced=_rows(fixed, B, num_samples, room).to(device), first_row=first_row)
    context = Context(session=session, condition=condition, num_samples=num_samples, prompt=session.prompt,
                      draft_vocab=session.draft_vocab)
    stop = None if stop_tokens is None else torch.as_tensor(list(stop_tokens), device=device)
    stats = decode(session, drafter, method.verifier, policy, state, context, stop, on_commit,
                   compile)
    tokens = state.seq[:, :N].masked_fill(torch.arange(N, device=device) >= state.n[:, None], -1)
    return Generation(tokens, state.n.clone(), stats)


def _count(condition) -> "int | None":
    """How many conditions: class ids [C], prompt ids [C, P], a list of prompts (strings or id lists), features
    [C, T, D] (a caption's, a text encoder's) alone or with their mask [C, T], a dict of such parts (Emu3's prompts
    and negative prompts) where a part of one is shared by all, or none (None: one, a target's unconditioned rows);
    None for other forms (run as they are)."""
    if condition is None:
        return 1
    if isinstance(condition, dict) and condition:
        counts = {_count(part) for part in condition.values()}
        return max(counts) if None not in counts and len(counts - {1}) <= 1 else None
    if isinstance(condition, tuple) and len(condition) == 2 and torch.is_tensor(condition[0]):
        condition = condition[0]  # (features, mask)
    if torch.is_tensor(condition) and condition.dim() in ((3,) if condition.is_floating_point() else (1, 2)):
        return condition.shape[0]
    if isinstance(condition, list) and all(isinstance(c, (str, list)) for c in condition):
        return len(condition)
    return None


def _take(condition, index: torch.Tensor):
    """The conditions at `index` [b], as `_count` reads them."""
    if condition is None:
        return None
    if isinstance(condition, tuple):
        return tuple(None if c is None else _take(c, index) for c in condition)
    if isinstance(condition, dict):  # (a part of one condition is every row's)
        return {name: part if _count(part) == 1 else _take(part, index) for name, part in condition.items()}
    return condition[index.to(condition.device)] if torch.is_tensor(condition) else [condition[i] for i in index]


def _given_rows(given: "torch.Tensor | None", rows: torch.Tensor, batch: int,
                num_samples: int) -> "torch.Tensor | None":
    """`given` [R, N] (per row, per condition or for all; checked by `_rows`) for the rows `rows` [b] of a request of
    `batch` rows -> [b, N] (or [1, N] for all)."""
    if given is None or given.shape[0] == 1:
        return given
    return given[rows] if given.shape[0] == batch else given[rows // num_samples]


def _check_given(given, layout: Layout, vocab_size: int) -> torch.Tensor:
    given = torch.as_tensor(given)
    if given.dim() != 2 or given.shape[1] != layout.length or given.is_floating_point():
        raise ValueError(f"given must be token ids [rows, {layout.length}] (-1 where the model generates), "
                         f"got {tuple(given.shape)} {given.dtype}")
    if given.numel() and (given.min() < -1 or given.max() >= vocab_size):
        raise ValueError(f"given tokens must be in [0, {vocab_size}) or -1, got values in "
                         f"[{int(given.min())}, {int(given.max())}]")
    structural = layout.forced()
    clash = (given >= 0) & (structural >= 0) & (given != structural)
    if clash.any():
        i = int(clash.any(0).nonzero()[0])
        raise ValueError(f"given token at index {i} differs from the layout's structural token {int(structural[i])}")
    return given.long()


def _forced(layout: Layout, given: "torch.Tensor | None") -> torch.Tensor:
    """[R, N] the token each row of `given` (one row without it) must have at each index: structural, then
    given, else FREE."""
    forced = layout.forced()[None]
    return forced if given is None else torch.where(given >= 0, given, forced)


def _rows(forced: torch.Tensor, batch: int, num_samples: int, window: int) -> torch.Tensor:
    """[R, N] -> [B, N + L]: per row of the batch, then FREE past the end (the last window's overhang)."""
    rows = forced.shape[0]
    if rows * num_samples == batch:
        forced = forced.repeat_interleave(num_samples, 0)
    elif rows == 1:
        forced = forced.expand(batch, -1)
    elif rows != batch:
        raise ValueError(f"given has {rows} rows; pass one per row ({batch}), per condition "
                         f"({batch // num_samples}) or one for all")
    return torch.cat([forced, torch.full((batch, window), FREE)], 1)


def row_seeds(seed: "int | Sequence[int]", batch: int, num_samples: int) -> list[int]:
    """The seed of each of `batch` rows, condition-major with `num_samples` rows a condition."""
    seeds = seed_list(seed)
    if seeds is None:
        seeds = [seed + i % num_samples for i in range(batch)]
    if len(seeds) != batch:
        raise ValueError(f"seed: got {len(seeds)} seeds for {batch} rows; pass one int or one seed per row")
    if min(seeds) < 0 or max(seeds) > MAX_SEED:  # (a larger seed would wrap onto a smaller one's noise)
        raise ValueError(f"row seeds must be in [0, 2**63-1], got {min(seeds)}..{max(seeds)}")
    return seeds

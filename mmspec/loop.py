"""The decode loop, the only one: prefill -> (window -> propose -> one target forward -> verify -> commit).

Every row of the batch verifies the same number of positions per forward (static shapes) but has
its own committed length, acceptance and random streams; rows that are done ride along masked, and
leave the forwards of every session that can drop them: the loop follows the rows still running
(mmspec.adapters.rows.Rows), narrows the target's session to them, and hands drafters that session and the `Rows`
to narrow the sessions they open themselves.
The window policy may change L from step to step; each step's verification is lossless by itself.

The loop decides L and when to stop: one read of the device per step (how many rows still run).
What follows the drafts, the target forward, p, verification and commit, is mmspec.verify_step's `VerifyStep`,
which mmspec.executor runs eager or compiles whole (`compile=True`: one graph per L; CUDA graphs on a
GPU).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from mmspec.adapters.base import Session
from mmspec.adapters.rows import Rows
from mmspec.drafters.base import Drafter
from mmspec.executor import Executor, rows_may_leave
from mmspec.state import DecodeState
from mmspec.stats import Stats
from mmspec.steps import Context, Window
from mmspec.verify import Verifier
from mmspec.verify_step import VerifyStep
from mmspec.window import WindowPolicy


@dataclass
class Wave:
    """A running decode as `Joins` sees it between two steps: the state, the counts, each token's forward
    (commit_step [B, N + max_window]), the rows that run, the target's session as the steps run it and the drafter."""
    state: DecodeState
    stats: Stats
    commit_step: torch.Tensor
    rows: Rows
    session: Session
    drafter: Drafter


class Joins(Protocol):
    """Rows that leave and join a running decode (mmspec.engine): called before every step, it takes the rows that
    finished and may start new ones in their places (`DecodeState.admit`, the session's `take`, the drafter's
    `admit`). The loop ends when no row runs after it."""

    in_step: bool  # whether rows may stay in step now (none has joined after the first step)

    def __call__(self, wave: Wave) -> None:
        ...


def decode(session: Session, drafter: Drafter, verifier: Verifier, policy: WindowPolicy, state: DecodeState,
           context: Context | None = None, stop_tokens: torch.Tensor | None = None,
           on_commit: Callable[[DecodeState, torch.Tensor], None] | None = None,
           compile: "bool | dict" = False, joins: "Joins | None" = None) -> Stats:
    """Run to the end of the layout (or each row's stop). `on_commit(state, k)` sees every step's
    commits (k [B] new tokens per row) and may end rows early with `state.finish`. `compile`: True, or
    torch.compile's keyword arguments, to compile the verify step (see mmspec.executor). `joins`: rows that join
    as others finish (mmspec.engine)."""
    t0 = time.perf_counter()
    stats = Stats.empty(state.batch_size, state.length, policy.max_window, state.seq.device)
    commit_step = torch.full_like(state.seq, -1)  # [B, N + max_window]
    device = torch.device(session.device)
    # the rows still running: every session narrowed to them drops the others (an engine's session may hold its first
    # rows alone: the places past them have no row yet)
    held = session.batch_size
    rows = Rows(state.batch_size, None if held == state.batch_size else torch.arange(held, device=state.seq.device))
    target = rows.narrow(session) if rows_may_leave(compile, device) else session
    step = Executor(VerifyStep(target, verifier, state, stats, commit_step, stop_tokens), state, compile,
                    None if target is session else rows)
    # rows whose forwards write the same cache slots need no attention mask and no per-row cache writes: on a CPU
    # (a static cache masks and writes by row anyway) a policy may ask the batch to stay in step (`in_step`); rows
    # that join start behind the others, and waiting for them would hold the others back
    keep_in_step = state.batch_size > 1 and device.type == "cpu"
    drafter.start(state, dataclasses.replace(context or Context(), session=target, rows=rows))
    policy.start(target, state)
    wave = Wave(state, stats, commit_step, rows, target, drafter)
    while True:
        if joins is not None:
            joins(wave)
        running = int(state.active.sum())  # the step's one read of the device
        if not running:
            break
        rows.follow(state.active, running)
        state.running = running if target is not session else state.batch_size
        t_step = time.perf_counter()  # the previous step's work is done: the read waited for it
        L = _checked(policy(state), state.max_window)
        ahead = state.forced_ahead()
        widened = ahead >= L  # forced tokens fill the window: take their whole run and the token after it
        window = Window(min(ahead + 1, state.max_window) if widened else L, widened,
                        keep_in_step and policy.in_step and (joins is None or joins.in_step))
        draft = drafter.propose(state, window)  # D = window.D draft slots, or fewer
        verdict, logp, k = step(state, draft, window)
        t_hook = time.perf_counter()
        if on_commit is not None:
            on_commit(state, k)
        t_hook = time.perf_counter() - t_hook
        drafter.update(state, draft, verdict, logp[:, :draft.slots + 1], k)
        if not window.widened:  # not the policy's L, nor its cost
            policy.observe(state, k, _elapsed(t_step, device) - t_hook)
        state.step += 1
    stats.committed = state.n.clone()  # tokens kept, after any stop string cut a row short
    stats.commit_step = commit_step[:, : state.length]
    stats.seconds = time.perf_counter() - t0
    return stats


def _elapsed(since: float, device: torch.device) -> float:
    """Seconds since `since`, the device's work included: an accelerator runs a step after its launches have
    returned, so without the wait a policy would time the launches alone, about the same at any L. (The next
    step's read of the rows still running would wait for the same work: the wait costs nothing.)"""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)
    return time.perf_counter() - since


def _checked(window: int, max_window: int) -> int:
    if not 1 <= window <= max_window:
        raise ValueError(f"the window policy asked for {window} positions; it allows 1..{max_window}")
    return window

"""The decode loop, the only one: prefill -> (window -> propose -> one target forward -> verify -> commit).

Every row of the batch verifies the same number of positions per forward (static shapes) but has
its own committed length, acceptance and random streams; rows that are done ride along masked.
The window policy may change L from step to step; each step's verification is lossless by itself.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import torch

from mmspec.adapters.base import Session
from mmspec.drafters.base import Drafter
from mmspec.state import DecodeState
from mmspec.stats import Stats
from mmspec.steps import Draft, Verdict
from mmspec.tree import Tree, proactive_tree
from mmspec.verify import Verifier
from mmspec.window import WindowPolicy


def decode(session: Session, drafter: Drafter, verifier: Verifier, policy: WindowPolicy, state: DecodeState,
           stop_tokens: torch.Tensor | None = None,
           on_commit: Callable[[DecodeState, torch.Tensor], None] | None = None) -> Stats:
    """Run to the end of the layout (or each row's stop). `on_commit(state, k)` sees every step's
    commits (k [B] new tokens per row) and may end rows early with `state.finish`."""
    t0 = time.perf_counter()
    stats = Stats.empty(state.batch_size, state.length, policy.max_window, state.seq.device)
    commit_step = torch.full_like(state.seq, -1)  # [B, N + max_window]
    drafter.start(state)
    policy.start(session, state)
    while state.active.any():
        t_step = time.perf_counter()  # the previous step's work is done: active.any() waited for it
        L = _checked(policy(state), state.max_window)
        ahead = state.forced_ahead()
        widened = ahead >= L  # forced tokens fill the window: take their whole run and the token after it
        state.window = L = min(ahead + 1, state.max_window) if widened else L
        draft = drafter.propose(state)
        if draft.useful is not None and not widened:  # verify only the slots worth it (decided before the forward)
            state.window = L = int(draft.useful.masked_fill(~state.active, 0).max().clamp(max=L - 1)) + 1
            draft = _cut(draft, L - 1)
        draft = _force_draft(state, draft)
        inputs = torch.cat([state.pending[:, None], draft.tokens], 1)  # [B, L]: last committed + drafts
        tree = None
        if draft.branches is not None:  # proactive branches ride along: [B, L + S * D] nodes
            tree = proactive_tree(L, draft.branches.shape[1], draft.branches.shape[2], inputs.device)
            inputs = torch.cat([inputs, draft.branches.flatten(1)], 1)
        logits = session.forward(inputs, state.n - 1, tree)
        logp = _force_p(state, state.sampling.logp(*logits), tree)  # [B, W, V]
        verdict = verifier(state, draft, logp)
        k = _commit(state, verdict, stats, commit_step, stop_tokens)
        if tree is not None:
            session.adopt(tree.path(verdict.branch))
        t_hook = time.perf_counter()
        if on_commit is not None:
            on_commit(state, k)
        t_hook = time.perf_counter() - t_hook
        drafter.update(state, draft, verdict, logp[:, :L], k)
        if not widened:  # not the policy's width, nor its cost
            policy.observe(state, k, time.perf_counter() - t_step - t_hook)
        state.step += 1
    stats.committed = state.n.clone()  # tokens kept, after any stop string cut a row short
    stats.commit_step = commit_step[:, : state.length]
    stats.seconds = time.perf_counter() - t0
    return stats


def _checked(window: int, max_window: int) -> int:
    if not 1 <= window <= max_window:
        raise ValueError(f"the window policy asked for {window} positions; it allows 1..{max_window}")
    return window


def _cut(draft: Draft, width: int) -> Draft:
    """The first `width` slots of a chain draft."""
    q = None if draft.q is None else draft.q[:, :width]
    return dataclasses.replace(draft, tokens=draft.tokens[:, :width], q=q, onehot=draft.onehot[:, :width], useful=None)


def _force_draft(state: DecodeState, draft: Draft) -> Draft:
    """Structural tokens are drafted as what they must be (one-hot q), on the chain and on its branches."""
    if not state.any_forced:
        return draft
    forced = state.structural(state.index(state.window - 1))  # [B, L-1]
    is_forced = forced >= 0
    branches = draft.branches
    if branches is not None:  # branch node t drafts index n + t
        depth = branches.shape[2]
        branches = torch.where(is_forced[:, None, :depth], forced[:, None, :depth], branches)
    return dataclasses.replace(draft, tokens=torch.where(is_forced, forced, draft.tokens),
                               onehot=draft.onehot | is_forced, branches=branches)


def _force_p(state: DecodeState, logp: torch.Tensor, tree: Tree | None) -> torch.Tensor:
    """At structural positions p is one-hot on the forced token (node w's p is for index n + offset[w])."""
    if not state.any_forced:
        return logp
    index = state.index() if tree is None else state.n[:, None] + tree.offset  # [B, W]
    forced = state.structural(index)
    is_forced = (forced >= 0)[..., None]
    token = forced.clamp(min=0)[..., None]
    logp = logp.masked_fill(is_forced, -torch.inf)
    return logp.scatter_(-1, token, logp.gather(-1, token).masked_fill(is_forced, 0.0))


def _commit(state: DecodeState, verdict: Verdict, stats: Stats, commit_step: torch.Tensor,
            stop_tokens: torch.Tensor | None) -> torch.Tensor:
    """Write the committed prefix of every active row; return k [B] (0 for rows already done)."""
    L, N = state.window, state.length
    index = verdict.index  # [B, L]
    slots = torch.arange(L, device=index.device)
    lead = verdict.accepted.long().cumprod(1).sum(1)  # drafts accepted before the first rejection
    k = torch.minimum(lead + 1, N - state.n) * state.active
    stopped = torch.zeros_like(state.active)
    if stop_tokens is not None:
        hit = torch.isin(verdict.y, stop_tokens) & (slots < k[:, None])
        stopped = hit.any(1)
        k = torch.where(stopped, hit.long().argmax(1) + 1, k)
    keep = slots < k[:, None]  # [B, L]
    state.seq.scatter_(1, index, torch.where(keep, verdict.y, state.seq.gather(1, index)))
    commit_step.scatter_(1, index, torch.where(keep, state.step, commit_step.gather(1, index)))

    stats.nfe += state.active
    if L > 1:  # a window of one has no drafts to count
        free = state.structural(index[:, :-1]) < 0  # [B, L-1]
        drafted = free & (index[:, :-1] < N) & state.active[:, None]
        accepted = (slots[:-1] < torch.minimum(lead, k)[:, None]) & free
        stats.drafted += drafted.sum(1)
        stats.accepted += accepted.sum(1)
        W = min(L, stats.window) - 1  # slots past the policy's widest (a widened step's) hold forced tokens only
        stats.accepted_at[:, :W] += accepted[:, :W]
        stats.forwards_at[:, :W] += state.active[:, None]

    last = verdict.y.gather(1, (k - 1).clamp(min=0)[:, None]).squeeze(1)
    state.pending = torch.where(k > 0, last, state.pending)
    state.n = state.n + k
    state.active = state.active & (state.n < N) & ~stopped
    return k

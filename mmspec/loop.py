"""The decode loop, the only one: prefill -> (window -> propose -> one target forward -> verify -> commit).

Every row of the batch verifies the same number of positions per forward (static shapes) but has
its own committed length, acceptance and random streams; rows that are done ride along masked, and
leave the target's forwards where the session can drop them (mmspec.adapters.rows.ActiveRows).
The window policy may change L from step to step; each step's verification is lossless by itself.

The loop decides L and when to stop: one read of the device per step (how many rows still run).
What follows the drafts, the target forward, p, verification and commit, is `VerifyStep`: a function
of tensors for a window of L with no read of the device inside, which `compile=True` compiles whole
(`fullgraph=True`, one graph per window width; CUDA graphs on a GPU).
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from mmspec.adapters.base import Session
from mmspec.drafters.base import Drafter
from mmspec.state import DecodeState
from mmspec.stats import Stats
from mmspec.steps import Context, Draft, TokenTree, TreeDraft, Verdict
from mmspec.tree import Tree
from mmspec.verify import Verifier
from mmspec.window import WindowPolicy


def decode(session: Session, drafter: Drafter, verifier: Verifier, policy: WindowPolicy, state: DecodeState,
           context: Context | None = None, stop_tokens: torch.Tensor | None = None,
           on_commit: Callable[[DecodeState, torch.Tensor], None] | None = None,
           compile: "bool | dict" = False) -> Stats:
    """Run to the end of the layout (or each row's stop). `on_commit(state, k)` sees every step's
    commits (k [B] new tokens per row) and may end rows early with `state.finish`. `compile`: True, or
    torch.compile's keyword arguments, to compile the verify step (see `VerifyStep`)."""
    t0 = time.perf_counter()
    stats = Stats.empty(state.batch_size, state.length, policy.max_window, state.seq.device)
    commit_step = torch.full_like(state.seq, -1)  # [B, N + max_window]
    step = VerifyStep(session, verifier, state, stats, commit_step, stop_tokens, compile)
    # rows whose forwards write the same cache slots need no attention mask and no per-row cache writes: on a CPU
    # (a static cache masks and writes by row anyway) a policy may ask the batch to stay in step (`in_step`)
    device = torch.device(session.device)
    keep_in_step = state.batch_size > 1 and device.type == "cpu"
    drafter.start(state, context or Context())
    policy.start(session, state)
    follow = getattr(session, "follow", None)  # a session that can drop the rows that are done (ActiveRows)
    while True:
        running = int(state.active.sum())  # the step's one read of the device
        if not running:
            break
        if follow is not None:
            follow(state.active, running)
        t_step = time.perf_counter()  # the previous step's work is done: the read waited for it
        L = _checked(policy(state), state.max_window)
        ahead = state.forced_ahead()
        widened = ahead >= L  # forced tokens fill the window: take their whole run and the token after it
        if widened:
            L = min(ahead + 1, state.max_window)
        draft = drafter.propose(state, L)
        asked, L = L, draft.width + 1  # a drafter may draft fewer than asked (a lookup with nothing to look up)
        in_step = keep_in_step and getattr(policy, "in_step", False) and draft.tree is None
        verdict, logp, k = step(state, draft, L, in_step, asked)
        t_hook = time.perf_counter()
        if on_commit is not None:
            on_commit(state, k)
        t_hook = time.perf_counter() - t_hook
        drafter.update(state, draft, verdict, logp[:, :L], k)
        if not widened:  # not the policy's width, nor its cost
            policy.observe(state, k, _elapsed(t_step, device) - t_hook)
        state.step += 1
    stats.committed = state.n.clone()  # tokens kept, after any stop string cut a row short
    stats.commit_step = commit_step[:, : state.length]
    stats.seconds = time.perf_counter() - t0
    return stats


RECOMPILE_LIMIT = 256


def _elapsed(since: float, device: torch.device) -> float:
    """Seconds since `since`, the device's work included: an accelerator runs a step after its launches have
    returned, so without the wait a policy would time the launches alone, about the same at any width. (The next
    step's read of the rows still running would wait for the same work: the wait costs nothing.)"""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)
    return time.perf_counter() - since


def _checked(window: int, max_window: int) -> int:
    if not 1 <= window <= max_window:
        raise ValueError(f"the window policy asked for {window} positions; it allows 1..{max_window}")
    return window


class VerifyStep:
    """The drafts of a window of L -> one target forward -> p -> verdict -> commit: (verdict, logp [B, W, V], k [B]).

    It reads nothing from the device, so `compile` can trace it whole: torch.compile with `fullgraph=True` (a
    graph break is an error, not a silent slowdown) and one graph per window width (`dynamic=False`: the
    window's L is a Python int, every tensor shape follows from it); on CUDA in mode "reduce-overhead" (CUDA
    graphs). A dict is passed to torch.compile as keyword arguments (e.g. {"backend": "eager"} to check the
    trace only). The target session's cache attends over all its slots inside a compiled step (see
    mmspec.cache: a static view), which is what an accelerator does anyway.

    Compiled, a chain shorter than the window asked for (a lookup's match, a head's chain that stopped where it was
    unsure) is padded to the next power of two within it (`_padded`), and the step commits no further than the
    drafts it was given: drafters whose chains vary in length then meet a few widths, not every one (eagle on text
    at window 8 met 14 kinds of step in three prompts, each compiled afresh, ten minutes of inductor on a CPU).
    """

    def __init__(self, session: Session, verifier: Verifier, state: DecodeState, stats: Stats,
                 commit_step: torch.Tensor, stop_tokens: torch.Tensor | None, compile: "bool | dict" = False):
        self.session, self.verifier, self.sampling, self.stats = session, verifier, state.sampling, stats
        self.commit_step, self.stop_tokens = commit_step, stop_tokens  # [B, N + max_window] forward of each commit
        self.run, self.compiled = self._run, bool(compile)
        self.widths: dict[int, torch.Tensor] = {}  # L -> L as a tensor (a compiled step's drafts end there)
        if compile:
            options = dict(compile) if isinstance(compile, dict) else {}
            if session.device.type == "cuda":
                options.setdefault("mode", "reduce-overhead")
            # one graph per window width and kind of draft (with or without q, a tree), for every method and
            # generation of the process: dynamo's default of 8 graphs per function would end a run mid-generation
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
            torch._dynamo.config.accumulated_recompile_limit = max(
                torch._dynamo.config.accumulated_recompile_limit, RECOMPILE_LIMIT)
            self.run = torch.compile(self._run, fullgraph=True, dynamic=False, **options)
            # what the step writes in place, kept at one address all generation long: CUDA graphs run a step only
            # when every input it writes is static ("skipping cudagraphs due to mutated inputs" otherwise: an eager
            # launch of every kernel). Unguarded: the next generation's tensors re-record the graphs, no recompile.
            for t in (*session.buffers(), state.seq, commit_step, *stats.written()):
                torch._dynamo.mark_static_address(t, guard=False)
        # on a CPU a compiled step is not always the faster (it attends over every slot: emoji-video's 64-wide step
        # took 1.18x eager's; emoji-image's `ar` step 0.57-0.87x): each kind of step is timed both ways, and the
        # faster runs. On an accelerator the compiled step (CUDA graphs) always does.
        self.faster = Faster() if compile and session.device.type == "cpu" else None

    def __call__(self, state: DecodeState, draft: "Draft | TreeDraft | TokenTree", L: int, in_step: bool = False,
                 asked: int | None = None):
        """The step over the drafts of a window of L, where the policy asked for `asked` >= L positions."""
        if not self.compiled or not getattr(self.session, "all_rows", True):  # rows have left (on a CPU): eager
            return self._run(state, draft, L, in_step)
        width = self.widths.get(L)
        if width is None:
            width = self.widths[L] = torch.tensor(L, device=state.seq.device)
        bucket = min(1 << (L - 1).bit_length(), asked or L) if isinstance(draft, Draft) else L
        key = (bucket, type(draft))
        compiled = self.faster is None or self.faster.compiled(key)
        t = time.perf_counter()
        if compiled:
            out = self.run(state, draft if bucket == L else _padded(draft, bucket - 1), bucket, in_step, width)
        else:
            out = self._run(state, draft, L, in_step)
        if self.faster is not None:
            self.faster.record(key, compiled, time.perf_counter() - t)
        return out

    @torch.no_grad()
    def _run(self, state: DecodeState, draft: "Draft | TreeDraft | TokenTree", L: int, in_step: bool = False,
             width: torch.Tensor | None = None):
        draft = _force_draft(state, draft, L)
        inputs = torch.cat([state.pending[:, None], draft.nodes()], 1)  # [B, W]: last committed, then drafts
        logits = self.session.forward(inputs, state.n - 1, draft.tree)
        logp = _force_p(state, self.sampling.logp(*logits), L, draft.tree)  # [B, W, V]
        verdict = self.verifier(state, draft, logp, L)
        k = _commit(state, verdict, L, self.stats, self.commit_step, self.stop_tokens, in_step, width)
        if verdict.path is not None:  # the tree's path taken now stands for the indices after n
            self.session.adopt(verdict.path)
        return verdict, logp, k


class Faster:
    """Which of the compiled and the eager step runs faster, per kind of step, timed on the running generation (on a
    CPU, where each step's time is the host's): `trial` timed steps of each, the compiled first (its first call, which
    compiles or re-records, is not counted), then the faster for the rest of the generation."""

    def __init__(self, trial: int = 3):
        self.trial = trial
        self.seconds: dict = {}  # kind -> ([compiled steps' seconds], [eager steps' seconds])

    def compiled(self, key) -> bool:
        compiled, eager = self.seconds.setdefault(key, ([], []))
        if len(compiled) <= self.trial or len(eager) < self.trial:
            return len(compiled) <= self.trial
        return min(compiled[1:]) <= min(eager)

    def record(self, key, compiled: bool, seconds: float) -> None:
        times = self.seconds.setdefault(key, ([], []))[0 if compiled else 1]
        if len(times) < self.trial + compiled:  # (the compiled list holds the untimed first call too)
            times.append(seconds)


def _padded(draft: Draft, W: int) -> Draft:
    """A chain of drafts -> W >= its width: its last token repeated, copied (one-hot q), for the step to verify and
    commit no further than the drafts it was given (`_commit`'s `width`). Lossless whatever the filler: the commit
    then ends at or before the given drafts' last slot, a point fixed before anything is drawn, and that slot's output
    is p's whether its filler draft passed or not."""
    pad = W - draft.width
    tokens = torch.cat([draft.tokens, draft.tokens[:, -1:].expand(-1, pad)], 1)
    onehot = torch.cat([draft.onehot, draft.onehot.new_ones(draft.onehot.shape[0], pad)], 1)
    q = None if draft.q is None else torch.nn.functional.pad(draft.q, (0, 0, 0, pad))  # (unread: one-hot slots)
    return Draft(tokens, q, onehot)


def _force_draft(state: DecodeState, draft: "Draft | TreeDraft | TokenTree",
                 L: int) -> "Draft | TreeDraft | TokenTree":
    """Structural tokens are drafted as what they must be (one-hot q), on the chain, on its branches, on every node
    of a token tree."""
    if not state.any_forced:
        return draft
    if isinstance(draft, TokenTree):  # node w holds index n - 1 + depth
        forced = state.structural(state.n[:, None] - 1 + draft.tree.offset[:, 1:])  # [B, N]
        return TokenTree(torch.where(forced >= 0, forced, draft.tokens), draft.parent, draft.tree)
    forced = state.structural(state.index(L - 1))  # [B, L-1]
    is_forced = forced >= 0
    chain = draft.chain if isinstance(draft, TreeDraft) else draft
    chain = Draft(torch.where(is_forced, forced, chain.tokens), chain.q, chain.onehot | is_forced)
    if not isinstance(draft, TreeDraft):
        return chain
    depth = draft.branches.shape[2]  # branch node t drafts index n + t
    branches = torch.where(is_forced[:, None, :depth], forced[:, None, :depth], draft.branches)
    return TreeDraft(chain, branches, draft.branch_q, draft.tree)


def _force_p(state: DecodeState, logp: torch.Tensor, L: int, tree: Tree | None) -> torch.Tensor:
    """At structural positions p is one-hot on the forced token (node w's p is for index n + offset[w])."""
    if not state.any_forced:
        return logp
    index = state.index(L) if tree is None else state.n[:, None] + tree.offset  # [B, W]
    forced = state.structural(index)
    is_forced = (forced >= 0)[..., None]
    token = forced.clamp(min=0)[..., None]
    logp = logp.masked_fill(is_forced, -torch.inf)
    return logp.scatter_(-1, token, logp.gather(-1, token).masked_fill(is_forced, 0.0))


def in_step_counts(state: DecodeState, verdict: Verdict, k: torch.Tensor) -> torch.Tensor:
    """k [B] tokens each row may commit -> the counts that bring every active row to the least index any of them
    reaches (rows in step stay in step; rows ahead wait, committing nothing, until the others catch up).

    Lossless: a committed prefix ends where a rule stops it that depends on the row's outputs only through what
    its verification already decided (k), and on other rows, whose draws are independent of this row's; every
    output the row commits is still its p given what precedes it. The outputs it does not commit are drawn again
    (a Jacobi window carries them with their q = the same p: they pass the next step). The batch's time is its
    slowest row's, which waits for nobody."""
    reach = torch.where(state.active, state.n + k, state.n.new_tensor(2**62)).min()  # [] least index reached
    return torch.minimum(k, (reach - state.n).clamp(min=0)) * state.active


def _commit(state: DecodeState, verdict: Verdict, L: int, stats: Stats, commit_step: torch.Tensor,
            stop_tokens: torch.Tensor | None, in_step: bool = False, width: torch.Tensor | None = None) -> torch.Tensor:
    """Write the committed prefix of every active row; return k [B] (0 for rows already done). `in_step`: every
    row stops where the row that gets least far does (`in_step_counts`). `width` [] (a padded chain, `_padded`):
    the window the drafts were given for; nothing past it is committed or counted as drafted."""
    N = state.length
    index = verdict.index  # [B, L]
    slots = torch.arange(L, device=index.device)
    lead = verdict.accepted.long().cumprod(1).sum(1)  # drafts accepted before the first rejection
    if width is not None:
        lead = torch.minimum(lead, width - 1)
    k = torch.minimum(lead + 1, N - state.n) * state.active
    if in_step and L > 1:  # (a window of one commits one token in every active row: they stay in step as they are)
        k = in_step_counts(state, verdict, k)
    stopped = None
    if stop_tokens is not None:
        hit = torch.isin(verdict.y, stop_tokens) & (slots < k[:, None])
        stopped = hit.any(1)
        k = torch.where(stopped, hit.long().argmax(1) + 1, k)
    keep = slots < k[:, None]  # [B, L]
    state.seq.scatter_(1, index, torch.where(keep, verdict.y, state.seq.gather(1, index)))
    # an active row has run every forward so far, so its forward count is the step's number (a tensor: a compiled
    # step must not see a Python int that changes every step)
    commit_step.scatter_(1, index, torch.where(keep, stats.nfe[:, None], commit_step.gather(1, index)))

    stats.nfe += state.active
    if L > 1:  # a window of one has no drafts to count
        # a draft counts where it is inside the layout, not structural, and among the drafts given (a padded chain);
        # an accepted one is committed too (k counts no more than the layout, the drafts given and the active rows)
        drafted = (index[:, :-1] < N) & state.active[:, None]  # [B, L-1]
        if state.any_forced:
            drafted &= state.structural(index[:, :-1]) < 0
        if width is not None:
            drafted &= slots[:-1] < width - 1
        accepted = drafted & (slots[:-1] < torch.minimum(lead, k)[:, None])
        stats.drafted += drafted.sum(1)
        stats.accepted += accepted.sum(1)
        W = min(L, stats.window) - 1  # slots past the policy's widest (a widened step's) hold forced tokens only
        stats.accepted_at[:, :W] += accepted[:, :W]
        stats.forwards_at[:, :W] += state.active[:, None] if width is None else \
            state.active[:, None] & (slots[:W] < width - 1)

    last = verdict.y.gather(1, (k - 1).clamp(min=0)[:, None]).squeeze(1)
    state.pending = torch.where(k > 0, last, state.pending)
    state.n = state.n + k
    active = state.active & (state.n < N)
    state.active = active if stopped is None else active & ~stopped
    return k

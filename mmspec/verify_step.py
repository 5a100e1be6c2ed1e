"""The step after the drafts: one target forward over the window, p, the verdict, and the commit of every row's
accepted prefix (`VerifyStep`). A function of tensors for a window of L with no read of the device inside, so that
mmspec.executor can run it eager or compile it whole; mmspec.loop decides L and when to stop around it."""
from __future__ import annotations

import torch

from mmspec.adapters.base import Session
from mmspec.adapters.rows import sampled
from mmspec.state import DecodeState
from mmspec.stats import Stats
from mmspec.steps import Draft, DraftRecord, TokenTree, TreeDraft, Verdict
from mmspec.tree import Tree
from mmspec.verify import Verifier


class VerifyStep:
    """The drafts of a window of L -> one target forward -> p -> verdict -> commit: (verdict, logp [B, W, V], k [B]).
    A function of tensors with no read of the device inside, so that mmspec.executor can compile it whole; `unpadded`
    [] (a padded chain): the L of the drafts it was given, nothing past it committed."""

    def __init__(self, session: Session, verifier: Verifier, state: DecodeState, stats: Stats,
                 commit_step: torch.Tensor, stop_tokens: torch.Tensor | None):
        self.session, self.verifier, self.sampling, self.stats = session, verifier, state.sampling, stats
        self.commit_step, self.stop_tokens = commit_step, stop_tokens  # [B, N + max_window] forward of each commit

    def buffers(self) -> tuple[torch.Tensor, ...]:
        """What the step writes in place, besides the state's tokens."""
        return (*self.session.buffers(), self.commit_step, *self.stats.written())

    @torch.no_grad()
    def __call__(self, state: DecodeState, draft: DraftRecord, L: int, in_step: bool = False,
                 unpadded: torch.Tensor | None = None):
        draft = _force_draft(state, draft, L)
        inputs = torch.cat([state.pending[:, None], draft.nodes()], 1)  # [B, W]: last committed, then drafts
        logp = _force_p(state, sampled(self.session, self.sampling, inputs, state.n - 1, draft.tree), L,
                        draft.tree)  # [B, W, V]
        verdict = self.verifier(state, draft, logp, L)
        k = _commit(state, verdict, L, self.stats, self.commit_step, self.stop_tokens, in_step, unpadded)
        if verdict.path is not None:  # the tree's path taken now stands for the indices after n
            self.session.adopt(verdict.path)
        return verdict, logp, k


def _force_draft(state: DecodeState, draft: DraftRecord,
                 L: int) -> DraftRecord:
    """Structural tokens are drafted as what they must be (one-hot q), on the chain, on its branches, on every node
    of a token tree."""
    if not state.any_forced:
        return draft
    if draft.chain is None:  # a token tree: node w holds index n - 1 + depth
        forced = state.structural(state.n[:, None] - 1 + draft.tree.offset[:, 1:])  # [B, N]
        return TokenTree(torch.where(forced >= 0, forced, draft.tokens), draft.parent, draft.tree)
    forced = state.structural(state.index(L - 1))  # [B, L-1]
    is_forced = forced >= 0
    chain = Draft(torch.where(is_forced, forced, draft.chain.tokens), draft.chain.q, draft.chain.onehot | is_forced)
    if draft.tree is None:
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


def in_step_counts(state: DecodeState, k: torch.Tensor) -> torch.Tensor:
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
            stop_tokens: torch.Tensor | None, in_step: bool = False, unpadded: torch.Tensor | None = None) -> torch.Tensor:
    """Write the committed prefix of every active row; return k [B] (0 for rows already done). `in_step`: every
    row stops where the row that gets least far does (`in_step_counts`). `unpadded` [] (a padded chain, see
    mmspec.executor): the L of the drafts the step was given; nothing past it is committed or counted as drafted."""
    lead = verdict.accepted.long().cumprod(1).sum(1)  # [B] drafts accepted before the first rejection
    if unpadded is not None:
        lead = torch.minimum(lead, unpadded - 1)
    k = torch.minimum(lead + 1, state.length - state.n) * state.active
    if in_step and L > 1:  # (a window of one commits one token in every active row: they stay in step as they are)
        k = in_step_counts(state, k)
    k, stopped = _stopped(verdict, k, stop_tokens)
    _write(state, verdict, k, commit_step, stats.nfe)
    stats.record(state, verdict.index, lead, k, L, unpadded)
    _advance(state, verdict, k, stopped)
    return k


def _stopped(verdict: Verdict, k: torch.Tensor, stop_tokens: torch.Tensor | None):
    """k [B] cut after a row's first stop token among its commits -> (k, stopped [B] or None)."""
    if stop_tokens is None:
        return k, None
    hit = torch.isin(verdict.y, stop_tokens) & (torch.arange(verdict.y.shape[1], device=k.device) < k[:, None])
    stopped = hit.any(1)
    return torch.where(stopped, hit.long().argmax(1) + 1, k), stopped


def _write(state: DecodeState, verdict: Verdict, k: torch.Tensor, commit_step: torch.Tensor,
           nfe: torch.Tensor) -> None:
    """The first k [B] outputs of each row into its sequence, and the forward that committed them."""
    index = verdict.index  # [B, L]
    keep = torch.arange(index.shape[1], device=index.device) < k[:, None]  # [B, L]
    state.seq.scatter_(1, index, torch.where(keep, verdict.y, state.seq.gather(1, index)))
    # an active row has run every forward so far, so its forward count is the step's number (a tensor: a compiled
    # step must not see a Python int that changes every step)
    commit_step.scatter_(1, index, torch.where(keep, nfe[:, None], commit_step.gather(1, index)))


def _advance(state: DecodeState, verdict: Verdict, k: torch.Tensor, stopped: torch.Tensor | None) -> None:
    """Each row's committed length and last token move on; rows at the end of the layout or at a stop are done."""
    last = verdict.y.gather(1, (k - 1).clamp(min=0)[:, None]).squeeze(1)
    state.pending.copy_(torch.where(k > 0, last, state.pending))
    state.n.add_(k)
    active = state.active & (state.n < state.length)
    state.active.copy_(active if stopped is None else active & ~stopped)

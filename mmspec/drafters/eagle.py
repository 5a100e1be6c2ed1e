"""A draft head over the target's own features (EAGLE-3, mmspec.reference.eagle) drafts the window.

The head keeps its own one-layer KV cache, with slot i for generated index i. Its input at index i
is the pair (the target's features at index i-1, token x_i): the features that predicted x_i and the
token drawn there. After a verification the k committed tokens and the features the same forward
computed before them (that forward fed indices n-1 .. n+L-2, so its first k columns are exactly the
features of indices n-1 .. n+k-2) are written to the head's cache in one head forward, whose last
output gives q for the next index. Drafting further feeds the head its own output as features, one
index at a time. No second target forward: the target session keeps the layers the head reads
(`Session.taps`) of the forward it runs anyway.

While the window is 1 nothing is drafted, so nothing needs q: the committed pairs wait (`_Pending`) and go into
the head's cache in one forward when a draft or a judge next asks (or when the wait fills), not one head forward per
target forward. A batch that runs plain AR (`auto` at many rows) then pays next to nothing for its head.

Draws: "sample" draws d_j ~ q_j with the aux stream (rejection verifiers test it under q_j);
"gumbel" takes argmax(log q_j + g_j) with position j's own noise row, the row AR draws with, so the
`exact` verifier accepts exactly AR's tokens. Before the first forward there are no features yet:
the first window drafts nothing, unless it lies over given tokens (a first frame), which it drafts as they are.

Proactive branches (mmspec.drafters.proactive): the head continues each sibling of d_0 itself
(`continue_branches`, a forest in its own cache), and when the verifier takes a branch the update
reads the target's features along that path (`Verdict.path`), so the head's cache holds exactly
the committed pairs again.

Token trees (EAGLE-2, mmspec.drafters.tree): `grow_tree` expands the head's most confident nodes level by level
(each level one head forward, its nodes seeing their ancestors in the head's cache) and keeps the best of them;
the update reads the features along the path taken, as with branches.

A window's first slots from the head and the rest from a Jacobi window: mmspec.drafters.splice.
"""
from __future__ import annotations

import dataclasses

import torch

from mmspec.adapters.base import Session
from mmspec.adapters.rows import Rows, with_copies
from mmspec.cache import StaticKVCache
from mmspec.drafters.base import Drafter
from mmspec.reference.eagle import EagleHead
from mmspec.sampling import sample_from
from mmspec.state import DecodeState
from mmspec.steps import CHAIN, Context, Draft, TokenTree, Window
from mmspec.tree import Tree, best_nodes, forest, token_tree

DRAWS = ("sample", "gumbel")


class HeadSession:
    """The head's cache and positions for one generation: rows as the target session's (CFG's null rows after).
    Rows that are done leave the head's forwards (`running`, the loop's mmspec.adapters.rows.Rows): callers keep
    passing and getting all rows, done ones getting zeros, as from the target."""

    def __init__(self, head: EagleHead, target: Session, state: DecodeState, rows: int, room: int = 0,
                 running: Rows | None = None):
        cfg, device = head.config, state.seq.device
        dtype = head.lm_head.weight.dtype
        self.head, self.target = head, target
        self.held, self.copies = state.batch_size, rows // state.batch_size  # batch rows the cache holds, c
        self.running = Rows(1) if running is None else running  # (a default Rows never drops a row)
        self.running.add(self)
        max_len = state.length + state.max_window + 1 + room  # room: slots past a window's (a tree's nodes, ...)
        self.cache = StaticKVCache(1, rows, cfg.num_key_value_heads, max_len, cfg.head_dim, dtype=dtype, device=device)
        positions = state.layout.positions().to(device)  # [N, A]; drafts past the end take the last position
        if positions.shape[1] != cfg.rope_axes:
            raise ValueError(f"the head's RoPE has {cfg.rope_axes} axes, the layout {positions.shape[1]}")
        positions = torch.cat([positions, positions[-1:].expand(max_len - len(positions), -1)])
        # computed in fp32, used in the head's dtype, as Llama's RoPE (a bf16 head's projections take bf16 inputs)
        self.rope = torch.stack(head.rope(positions)).to(dtype)  # [2, S, 1, hd]: cos, sin (one gather a forward)
        self.embed = target.embed if head.embed_tokens is None else head.embed_tokens
        self.dtype = dtype
        self.to_target = head.scatter_vocabulary if head.maps_vocabulary() else None  # (asked once: a device read)

    @torch.no_grad()
    def forward(self, hidden: torch.Tensor, tokens: torch.Tensor, start: torch.Tensor,
                columns: torch.Tensor | None = None, tree: Tree | None = None):
        """Features [R, T, F] (the target's) or the head's outputs [R, T, H], tokens [R, T] at indices start [R] ..
        -> (outputs [R, T', H], logits over the target vocabulary [R, T', V]); every pair goes into the cache, but
        with `columns` [R, T'] only those columns of each row are carried on: the others are context, never drafts.
        With a `tree` (mmspec.tree), pair w sits in slot start + w at index start + tree.offset[w] (its RoPE
        position) and attends to the slots before the tree's A and to those of them tree.visible[w] names."""
        head, R = self.head, tokens.shape[0]
        run = self.running.run(self.copies)
        if run is not None:  # only the rows still running
            hidden, tokens, start = hidden[run], tokens[run], start[run]
            columns = None if columns is None else columns[run]
        if tree is not None:
            tree = self.running.tree(tree.rows(R))
        slots = start[:, None] + torch.arange(tokens.shape[1], device=start.device)  # [R, T]
        index = slots if tree is None else start[:, None] + tree.offset  # [R, T] generated index of each pair
        view = self.cache.view(slots, None if tree is None else tree.visible)
        embeds = self.embed(tokens.clamp(min=0)).to(self.dtype)  # the target's dtype may differ from the head's
        hidden = head.fuse(hidden.to(self.dtype))  # [R, T, H]
        q, k, v = head.qkv(embeds, hidden, self.rope[:, index].unbind(0))
        k, v = view.update(0, k, v)
        mask = view.mask  # [R, 1, T, S] or None
        if columns is not None:  # queries, residual and mask rows of those columns only
            T = columns.shape[1]
            q = q.gather(2, columns[:, None, :, None].expand(-1, q.shape[1], T, q.shape[3]))
            hidden = hidden.gather(1, columns[..., None].expand(-1, T, hidden.shape[2]))
            if mask is not None:
                mask = mask.gather(2, columns[:, None, :, None].expand(-1, 1, T, mask.shape[3]))
        out, logits = head.attend(hidden, q, k, v, mask)
        self.cache.advance(slots)
        logits = logits.float()
        out, logits = self.running.whole(out), self.running.whole(logits)  # [R', ..] -> [R, ..], zeros for done rows
        return out, logits if self.to_target is None else self.to_target(logits)

    def select(self, kept: torch.Tensor) -> None:
        """Keep the rows at places `kept` [B'] of those the cache holds, and their copies (rows only ever leave)."""
        self.cache.select(with_copies(kept, self.held, self.copies))
        self.held = len(kept)


class _Pending:
    """The pairs of steps of window 1 not yet in the head's cache, by generated index: row r's held indices run
    from first[r] to n[r] - 1 (a row of a batch kept in step may commit nothing in a step: its pair is written again
    at the same place). Holds at most `room` indices a row; who holds it writes them in one head forward."""

    def __init__(self, room: int):
        self.room = room
        self.first: torch.Tensor | None = None  # [R] the first index held (None: nothing held)
        self.features: torch.Tensor | None = None  # [R, room, F] the target's features of index i - 1 at i - first
        self.steps = 0

    def add(self, features: torch.Tensor, n0: torch.Tensor):
        """Features [R, 1, F] of the step whose window began at index n0 [R] (its pair: those features, token n0)."""
        if self.first is None:
            self.first = n0
            self.features = features.new_zeros(features.shape[0], self.room, features.shape[-1])
        at = (n0 - self.first).clamp(max=self.room - 1)  # [R] (rows already done may have moved on: never read)
        self.features.scatter_(1, at[:, None, None].expand(-1, 1, features.shape[-1]), features)
        self.steps += 1

    def full(self) -> bool:
        return self.steps >= self.room

    def take(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        """-> (features [R, T, F], first index [R], T): T = steps held, each row's indices first .. first + T - 1
        (a row that committed less holds fewer: its last column is read by its count, the rest is overwritten
        before anything attends to it)."""
        T, first, features = self.steps, self.first, self.features[:, :self.steps]
        self.first = self.features = None
        self.steps = 0
        return features, first, T


class EagleDrafter:
    makes = frozenset({CHAIN})  # (a TreeDrafter around it makes its token trees)
    # steps of window 1 whose pairs wait for one head forward: a bound on the memory they hold and on the work of one
    # catch-up forward, which the next wide step pays (and a window policy sees in that step's time)
    WAIT = 16

    def __init__(self, head: EagleHead, draw: str = "sample", tree_nodes: int = 0, tree_level: int = 0,
                 stop: float = 0.0):
        """tree_nodes: nodes proactive branches add to a window at most; tree_level: nodes a token tree's level feeds
        the head (`grow_tree`'s top_k), for as many levels as the widest window has drafts but one (the head's cache
        has room for them). stop: the chain ends after a slot where, in every row, the head's most likely token has
        probability below `stop` (its softmax at temperature 1): what follows an unsure slot is mostly refused, and
        each further slot costs a head forward and a wider target forward."""
        if draw not in DRAWS:
            raise ValueError(f"draw must be one of {DRAWS}, got {draw!r}")
        if not 0.0 <= stop < 1.0:
            raise ValueError(f"stop must be a probability in [0, 1), got {stop!r}")
        self.head, self.draw, self.tree_nodes, self.tree_level, self.stop = head, draw, tree_nodes, tree_level, stop

    def start(self, state: DecodeState, context: Context):
        if self.head.config.vocab_size != state.vocab_size:
            raise ValueError(f"the head drafts a vocabulary of {self.head.config.vocab_size} tokens, the target has "
                             f"{state.vocab_size}")
        target = context.session
        if target is None:
            raise ValueError("an EAGLE head reads the target's features: the drafter needs the target session")
        target.taps = self.head.config.target_layers
        self.rows = 2 if state.sampling.cfg else 1  # CFG: the head runs the null rows too, as the target does
        # slots past the end: a tree's nodes, and a catch-up's columns after a row that waited (kept in step) or is
        # done, up to WAIT past its first waiting index
        room = self.tree_nodes + max(state.max_window - 2, 0) * self.tree_level + self.WAIT
        self.session = HeadSession(self.head, target, state, state.batch_size * self.rows, room, context.rows)
        self.h = self.z = None  # [R, H] the head's last output, [R, V] its logits for index n (None: no features yet)
        self.pending = _Pending(self.WAIT)

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        return x.repeat(self.rows, *(1,) * (x.dim() - 1))

    def _q(self, state: DecodeState, z: torch.Tensor) -> torch.Tensor:
        """[R, V] head logits -> [B, V] log q under the target's sampling (CFG, temperature, top-k/p)."""
        B = state.batch_size
        return state.sampling.logp(z[:B], z[B:] if self.rows == 2 else None)

    def next_logq(self, state: DecodeState) -> "torch.Tensor | None":
        """[B, V] the head's log q for index n, from the committed tokens' features (None before the first forward):
        what a `LookupOrDrafter` judges a lookup's first draft by."""
        self._catch_up(state)
        return None if self.z is None else self._q(state, self.z)

    def propose(self, state, window):
        B, L = state.batch_size, window.L
        if L == 1:
            return Draft.copied(state.seq.new_zeros(B, 0))
        self._catch_up(state)
        if self.z is None:  # no features yet: only a window the loop widened over given tokens, drafted as they are
            if state.forced_ahead() >= L - 1:  # (one read of the device, at the first step only)
                return Draft.copied(state.structural(state.index(L - 1)).clamp(min=0))
            return Draft.copied(state.seq.new_zeros(B, 0))
        u = state.streams.uniform(L - 1).to(state.seq.device) if self.draw == "sample" else None
        h, z = self.h, self.z
        drafts, qs = [], []
        for j in range(L - 1):
            index = state.index(1, j)  # [B, 1]
            logq = self._q(state, z)  # [B, V]
            q = logq.exp()
            d = self._draw(state, logq[:, None], q[:, None], index, None if u is None else u[:, j:j + 1])[:, 0]
            drafts.append(d)
            qs.append(q)
            if j == L - 2 or self._unsure(state, z):
                break
            out, logits = self.session.forward(h[:, None], self._rows(d[:, None]), self._rows(index[:, 0]))
            h, z = out[:, 0], logits[:, 0]
        tokens = torch.stack(drafts, 1)
        return Draft(tokens, torch.stack(qs, 1), torch.zeros_like(tokens, dtype=torch.bool))

    def _unsure(self, state: DecodeState, z: torch.Tensor) -> bool:
        """Whether every row's head logits z [R, V] give their most likely token less than `stop` (rows that are
        done have zero logits: unsure). A function of the head's own output only, so a
        draft's length depends on nothing the verifier draws: each slot drafted is still tested under its q."""
        if self.stop == 0.0:
            return False
        top = z[:state.batch_size].float().softmax(-1).amax(-1)  # [B] (CFG's null rows excluded)
        return bool((top < self.stop).all())

    def _draw(self, state: DecodeState, logq: torch.Tensor, q: torch.Tensor, index: torch.Tensor,
              u: torch.Tensor | None) -> torch.Tensor:
        """log q and q [B, .., V] at index [B, 1] -> drafts [B, ..]: d ~ q with uniforms u [B, ..], or (u None)
        argmax(log q + g) with the index's own noise row; a forced index drafts its token (fed as it will be)."""
        d = sample_from(q, u) if u is not None else state.gumbel_max(logq, index)
        forced = state.structural(index)  # [B, 1]
        return torch.where(forced >= 0, forced, d)

    def continue_branches(self, state: DecodeState, siblings: torch.Tensor, D: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Siblings [B, S] of d_0, each continued by the head itself: D-1 head forwards over all branches at once
        (a forest from index n in the head's cache, over the chain's drafts there: the next update rewrites every
        slot from n that is ever attended again) -> branches [B, S, D], their children's laws [B, S, D-1, V] (None
        if D == 1). A sibling follows the head's output at n-1, as d_0 does; child t is drawn as the chain's draft
        at n+t is, from the branch's own q."""
        self._catch_up(state)
        B, S = siblings.shape
        R = B * self.rows
        nodes = siblings[..., None]  # [B, S, t]
        hidden = self.h[:, None, None].expand(R, S, 1, self.h.shape[-1])  # [R, S, t, H] what each node follows
        u = state.streams.uniform(S, D - 1).to(nodes.device) if self.draw == "sample" else None
        qs = []
        for t in range(1, D):
            deepest = (torch.arange(S, device=nodes.device) * t + t - 1).expand(R, S)  # each branch's last node
            out, logits = self.session.forward(hidden.flatten(1, 2), self._rows(nodes.flatten(1)), self._rows(state.n),
                                               deepest, forest(S, t, nodes.device))  # [R, S, H], [R, S, V]
            logq = self._q(state, logits)  # [B, S, V]
            qs.append(logq.exp())
            child = self._draw(state, logq, qs[-1], state.index(1, t), None if u is None else u[:, :, t - 1])
            nodes = torch.cat([nodes, child[..., None]], 2)
            hidden = torch.cat([hidden, out[:, :, None]], 2)
        return nodes, torch.stack(qs, 2) if qs else None

    def _confidence(self, state: DecodeState, z: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """Head logits z [R, T, V] for indices [B, T] -> [B, T, V] log of how likely the head finds each token to be
        AR's draw there (what a token tree is verified against): log softmax(log q + g) on the index's own noise
        row, the chance that argmax(log p + g) is each token were log p the head's log q plus Gumbel noise. q is the
        head's under the target's CFG and temperature but not truncated (top-k / top-p would rule out, for good,
        the tokens where the head's nucleus misses p's). A greedy p ranks by the head's softmax at temperature 1
        (no noise moves its draw); a forced index is sure of its token."""
        B, sampling = state.batch_size, state.sampling
        greedy = sampling.temperature == 0
        sampling = dataclasses.replace(sampling, temperature=sampling.temperature or 1.0, top_k=None, top_p=None)
        logq = sampling.logp(z[:B], z[B:] if self.rows == 2 else None)
        if not greedy:
            logq = (logq + state.streams.gumbel(index).to(logq.device)).log_softmax(-1)
        if not state.any_forced:
            return logq
        forced = state.structural(index)[..., None]  # [B, T, 1]
        sure = torch.full_like(logq, -torch.inf).scatter_(-1, forced.clamp(min=0), 0.0)
        return torch.where(forced >= 0, sure, logq)

    def grow_tree(self, state: DecodeState, window: Window, nodes: int, top_k: int) -> "Draft | TokenTree":
        """EAGLE-2's dynamic tree for a window of L (depth D = L-1): level 1 holds the head's top_k most confident
        tokens at index n (`_confidence`); each further level feeds the top_k best nodes of the last (by cumulative
        confidence: the sum of log confidence along the path) through the head at once, each seeing its ancestors
        in the head's cache, and offers top_k children of each; the `nodes` best of all candidates make the tree
        (mmspec.tree.best_nodes). Before the head has features, or with no drafts to make, the chain's draft."""
        self._catch_up(state)
        if window.D == 0 or self.z is None:
            return self.propose(state, window)
        B, K, D, n = state.batch_size, top_k, window.D, state.n
        device = n.device
        score, token = self._confidence(state, self.z[:, None], n[:, None])[:, 0].topk(K, -1)  # [B, K] level 1
        scores, tokens, parents = [score], [token], [torch.full_like(token, -1)]
        last = torch.arange(K, device=device).expand(B, K)  # [B, K] the level's candidate indices
        own = torch.eye(K, dtype=torch.bool, device=device).expand(B, K, K)
        seen = own  # [B, K, A]: what each node of the level sees of the head's slots n .. (its ancestors and itself)
        hidden = self.h[:, None].expand(-1, K, -1)  # [R, K, H] the output each node follows
        for t in range(1, D):  # level t (tokens for index n-1+t, in slots n+(t-1)K ..) proposes level t+1
            level = Tree(torch.full((K,), (t - 1) * (1 - K), device=device), seen, 0, t)  # index n-1+t
            out, logits = self.session.forward(hidden, self._rows(token), self._rows(n + (t - 1) * K), tree=level)
            child_score, child = self._confidence(state, logits, state.index(1, t).expand(B, K)).topk(K, -1)
            child_score = (score[..., None] + child_score).flatten(1)  # [B, K * K] cumulative
            scores.append(child_score)
            tokens.append(child.flatten(1))
            parents.append(last[..., None].expand(B, K, K).flatten(1))
            score, best = child_score.topk(K, -1)  # the next level: [B, K]
            up = best // K  # each one's parent, by its place in this level
            token = tokens[-1].gather(1, best)
            last = sum(x.shape[1] for x in scores[:-1]) + best
            seen = torch.cat([seen.gather(1, up[..., None].expand(-1, -1, seen.shape[2])), own], 2)
            hidden = out.gather(1, self._rows(up)[..., None].expand(-1, -1, out.shape[2]))
        score, token, parent = torch.cat(scores, 1), torch.cat(tokens, 1), torch.cat(parents, 1)  # [B, M]
        depth = torch.cat([torch.full((x.shape[1],), t + 1, device=device) for t, x in enumerate(scores)])  # [M]
        chosen, up = best_nodes(score, parent, min(nodes, score.shape[1]))
        return TokenTree(token.gather(1, chosen), up, token_tree(up, depth[chosen], D))

    def update(self, state, draft, verdict, logp, k):
        features = self.session.target.features  # [R, W, F] of the forward just verified
        if features is None or features.shape[-1] != self.head.config.feature_size:
            raise ValueError(f"the head reads features of size {self.head.config.feature_size} (target layers "
                             f"{list(self.head.config.target_layers)}), the target gave "
                             f"{None if features is None else features.shape[-1]}: a head for another model?")
        B, L = verdict.y.shape
        # column j: the forward's node before token j. A chain's are nodes 0 .. L-1; with a tree, tokens 1 .. D
        # follow the nodes of the path taken (the chain's own, or a branch's: Verdict.path), token 0 node 0.
        if verdict.path is None:
            features = features[:, :L]
        else:
            column = torch.arange(L, device=features.device).expand(B, L)
            column = torch.cat([column[:, :1], verdict.path, column[:, verdict.path.shape[1] + 1:]], 1)
            features = features.gather(1, self._rows(column)[..., None].expand(-1, -1, features.shape[-1]))
        n0 = state.n - k  # the window's first index: column j holds (features of n0-1+j, token n0+j)
        if L == 1 and verdict.path is None:  # nothing was drafted: the pair waits for the next draft
            self.pending.add(features, self._rows(n0))
            if self.pending.full():
                self._catch_up(state)
            return
        self._catch_up(state)
        last = self._rows((k - 1).clamp(min=0))[:, None]  # [R, 1] the last committed token's column
        out, logits = self.session.forward(features, self._rows(verdict.y), self._rows(n0), last)
        self.h, self.z = out[:, 0], logits[:, 0]

    def _catch_up(self, state: DecodeState):
        """The waiting pairs -> the head's cache, in one head forward; h and z then follow the last committed token.
        Tokens come from the committed sequence (a row's held indices first .. n - 1 are committed)."""
        if self.pending.first is None:
            return
        features, first, T = self.pending.take()
        index = (first[:, None] + torch.arange(T, device=first.device)).clamp(max=state.seq.shape[1] - 1)  # [R, T]
        last = self._rows(state.n) - 1 - first  # [R] the last committed index's column (-1: none committed)
        out, logits = self.session.forward(features, self._rows(state.seq).gather(1, index), first,
                                           last.clamp(0, T - 1)[:, None])
        if self.z is None:
            self.h, self.z = out[:, 0], logits[:, 0]
        else:  # a row (kept in step) that committed nothing since keeps what it had
            moved = (last >= 0)[:, None]
            self.h, self.z = torch.where(moved, out[:, 0], self.h), torch.where(moved, logits[:, 0], self.z)

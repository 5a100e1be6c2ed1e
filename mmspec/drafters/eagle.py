"""A draft head over the target's own features (EAGLE-3, mmspec.reference.eagle) drafts the window.

The head keeps its own one-layer KV cache, with slot i for generated index i. Its input at index i
is the pair (the target's features at index i-1, token x_i): the features that predicted x_i and the
token drawn there. After a verification the k committed tokens and the features the same forward
computed before them (that forward fed indices n-1 .. n+L-2, so its first k columns are exactly the
features of indices n-1 .. n+k-2) are written to the head's cache in one head forward, whose last
output gives q for the next index. Drafting further feeds the head its own output as features, one
index at a time. No second target forward: the target session keeps the layers the head reads
(`Session.taps`) of the forward it runs anyway.

Draws: "sample" draws d_j ~ q_j with the aux stream (rejection verifiers test it under q_j);
"gumbel" takes argmax(log q_j + g_j) with position j's own noise row, the row AR draws with, so the
`exact` verifier accepts exactly AR's tokens. Before the first forward there are no features yet:
the first window drafts nothing, unless it lies over given tokens (a first frame), which it drafts as they are.

Proactive branches (mmspec.drafters.proactive): the head continues each sibling of d_0 itself
(`continue_branches`, a forest in its own cache), and when the verifier takes a branch the update
reads the target's features along that path (`Verdict.path`), so the head's cache holds exactly
the committed pairs again.

`SplicedDrafter` gives a window's first slots from one drafter (the head, which sees the token the
last step corrected) and the rest from another (a Jacobi window that carries its drafts on).
"""
from __future__ import annotations

import torch

from mmspec.adapters.base import Session
from mmspec.cache import StaticKVCache
from mmspec.drafters.base import Drafter
from mmspec.reference.eagle import EagleHead
from mmspec.sampling import sample_from
from mmspec.state import DecodeState
from mmspec.steps import Context, Draft
from mmspec.tree import Tree, forest

DRAWS = ("sample", "gumbel")


class HeadSession:
    """The head's cache and positions for one generation: rows as the target session's (CFG's null rows after)."""

    def __init__(self, head: EagleHead, target: Session, state: DecodeState, rows: int, tree_nodes: int = 0):
        cfg, device = head.config, state.seq.device
        dtype = head.lm_head.weight.dtype
        self.head, self.target = head, target
        max_len = state.length + state.max_window + 1 + tree_nodes  # (proactive branches: a forest from index n)
        self.cache = StaticKVCache(1, rows, cfg.num_key_value_heads, max_len, cfg.head_dim, dtype=dtype, device=device)
        positions = state.layout.positions().to(device)  # [N, A]; drafts past the end take the last position
        if positions.shape[1] != cfg.rope_axes:
            raise ValueError(f"the head's RoPE has {cfg.rope_axes} axes, the layout {positions.shape[1]}")
        positions = torch.cat([positions, positions[-1:].expand(max_len - len(positions), -1)])
        # computed in fp32, used in the head's dtype, as Llama's RoPE (a bf16 head's projections take bf16 inputs)
        self.cos, self.sin = (t.to(dtype) for t in head.rope(positions))  # [S, 1, hd]
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
        position) and attends to the slots before start and to the pairs tree.visible[w]."""
        head = self.head
        slots = start[:, None] + torch.arange(tokens.shape[1], device=start.device)  # [R, T]
        index = slots if tree is None else start[:, None] + tree.offset  # [R, T] generated index of each pair
        view = self.cache.view(slots, None if tree is None else tree.visible)
        embeds = self.embed(tokens.clamp(min=0)).to(self.dtype)  # the target's dtype may differ from the head's
        hidden = head.fuse(hidden.to(self.dtype))  # [R, T, H]
        q, k, v = head.qkv(embeds, hidden, (self.cos[index], self.sin[index]))
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
        return out, logits if self.to_target is None else self.to_target(logits)


class EagleDrafter:
    def __init__(self, head: EagleHead, draw: str = "sample", tree_nodes: int = 0):
        """tree_nodes: nodes proactive branches add to a window at most (the head's cache has room for them)."""
        if draw not in DRAWS:
            raise ValueError(f"draw must be one of {DRAWS}, got {draw!r}")
        self.head, self.draw, self.tree_nodes = head, draw, tree_nodes

    def start(self, state: DecodeState, context: Context):
        if self.head.config.vocab_size != state.vocab_size:
            raise ValueError(f"the head drafts a vocabulary of {self.head.config.vocab_size} tokens, the target has "
                             f"{state.vocab_size}")
        target = context.session
        if target is None:
            raise ValueError("an EAGLE head reads the target's features: the drafter needs the target session")
        target.taps = self.head.config.target_layers
        self.rows = 2 if state.sampling.cfg else 1  # CFG: the head runs the null rows too, as the target does
        self.session = HeadSession(self.head, target, state, state.batch_size * self.rows, self.tree_nodes)
        self.h = self.z = None  # [R, H] the head's last output, [R, V] its logits for index n (None: no features yet)

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        return x.repeat(self.rows, *(1,) * (x.dim() - 1))

    def _q(self, state: DecodeState, z: torch.Tensor) -> torch.Tensor:
        """[R, V] head logits -> [B, V] log q under the target's sampling (CFG, temperature, top-k/p)."""
        B = state.batch_size
        return state.sampling.logp(z[:B], z[B:] if self.rows == 2 else None)

    def propose(self, state, L):
        B = state.batch_size
        if L == 1:
            return Draft.copied(state.seq.new_zeros(B, 0))
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
            if j < L - 2:
                out, logits = self.session.forward(h[:, None], self._rows(d[:, None]), self._rows(index[:, 0]))
                h, z = out[:, 0], logits[:, 0]
        tokens = torch.stack(drafts, 1)
        return Draft(tokens, torch.stack(qs, 1), torch.zeros_like(tokens, dtype=torch.bool))

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

    def update(self, state, draft, verdict, logp, k):
        features = self.session.target.features  # [R, W, F] of the forward just verified
        if features is None or features.shape[-1] != self.head.config.feature_size:
            raise ValueError(f"the head reads features of width {self.head.config.feature_size} (target layers "
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
        last = self._rows((k - 1).clamp(min=0))[:, None]  # [R, 1] the last committed token's column
        out, logits = self.session.forward(features, self._rows(verdict.y), self._rows(n0), last)
        self.h, self.z = out[:, 0], logits[:, 0]


class SplicedDrafter:
    """The first `slots` drafts of a window from `first`, the others from `rest`; both see every outcome.

    Lossless as each part is: the verifier tests every slot's draft under its own q, and the two parts draw
    from separate randomness, so a slot's draft is distributed as its q given everything before it."""

    def __init__(self, first: Drafter, rest: Drafter, slots: int):
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.first, self.rest, self.slots = first, rest, slots

    def start(self, state, context):
        self.first.start(state, context)
        self.rest.start(state, context)

    def propose(self, state, L):
        rest = self.rest.propose(state, L)
        head = self.first.propose(state, min(self.slots, rest.width) + 1)
        h = head.width  # (0 before the head has features)
        if h == 0:
            return rest
        if rest.width == h:
            return head
        q = None
        if head.q is not None or rest.q is not None:
            V = (head.q if head.q is not None else rest.q).shape[2]
            zeros = lambda d: d.tokens.new_zeros(*d.tokens.shape, V, dtype=torch.float32)  # noqa: E731
            q = torch.cat([head.q if head.q is not None else zeros(head), (rest.q if rest.q is not None else zeros(rest))[:, h:]], 1)
        return Draft(torch.cat([head.tokens, rest.tokens[:, h:]], 1), q, torch.cat([head.onehot, rest.onehot[:, h:]], 1))

    def update(self, state, draft, verdict, logp, k):
        self.first.update(state, draft, verdict, logp, k)
        self.rest.update(state, draft, verdict, logp, k)

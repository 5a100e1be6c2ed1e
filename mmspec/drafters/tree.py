"""Token trees (EAGLE-2, Li et al. 2024, arXiv 2406.16858): a draft tree with branching at every depth.

A chain drafted by a head fails wherever the head's first choice is not p's draw, at every slot. A tree
offers several continuations at every node: the drafter expands its most confident nodes level by level
and keeps the best N of all it proposed (by cumulative confidence, the product of its confidences along
the path), so the tree is shaped by where the head is unsure. One target forward computes p at every
node (mmspec.tree: each node sees its ancestors), and the verifier walks down from the last committed
token, taking p's own draw at each node and descending into the child that equals it
(mmspec.verify.TreeVerifier).

Children are chosen, not drawn: they need no q, and the verification commits p's own draws whatever the
tree holds. The tree must only be chosen without the verifier's randomness: rejection mode draws with the
aux stream, which the drafter never reads; `exact` draws argmax(log p + g) with AR's noise, which the
drafter may read (any tree keeps AR's tokens) and does, to rank by the chance of matching AR's draw.

`TreeDrafter` wraps a chain drafter that can grow such trees (`grow_tree`: the EAGLE head).
"""
from __future__ import annotations

from typing import Protocol

from mmspec.drafters.base import Drafter
from mmspec.state import DecodeState
from mmspec.steps import Draft, TokenTree


class TreeGrower(Drafter, Protocol):
    def grow_tree(self, state: DecodeState, L: int, nodes: int, top_k: int) -> "Draft | TokenTree":
        """A token tree of `nodes` nodes for a window of L (depth L-1), top_k children per expanded node, or the
        chain's draft where it has none to grow."""
        ...


class TreeDrafter:
    """A chain drafter that drafts a token tree of `nodes` nodes (top_k children per expanded node) in every
    window instead of its chain."""

    def __init__(self, chain: TreeGrower, nodes: int, top_k: int):
        self.chain, self.nodes, self.top_k = chain, nodes, top_k

    def start(self, state, context):
        self.chain.start(state, context)

    def propose(self, state, L):
        return self.chain.grow_tree(state, L, self.nodes, self.top_k)

    def update(self, state, draft, verdict, logp, k):
        self.chain.update(state, draft, verdict, logp, k)

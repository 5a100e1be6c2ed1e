"""Token trees (EAGLE-2, Li et al. 2024, arXiv 2406.16858): a draft tree with branching at every depth.

A chain drafted by a head fails wherever the head's first choice is not p's draw, at every slot. A tree
offers several continuations at every node: the drafter expands its most confident nodes level by level
and keeps the best N of all it proposed (by cumulative confidence, the product of its confidences along
the path), so the tree is shaped by where the head is unsure. One target forward computes p at every
node (mmspec.tree: each node sees its ancestors), and the verifier walks down from the last committed
token, taking AR's draw at each node, argmax(log p + g) on the index's noise row, and descending into the
child that equals it (mmspec.verify.TreeVerifier).

Children are chosen, not drawn: they need no q, and the verification commits AR's tokens whatever the tree
holds, with or without `exact`. So the drafter may read AR's noise, and does: it ranks by the chance of
matching AR's draw (softmax(log q + g)). A fresh draw from p would pass a chosen child only with its p-mass,
below what rejection sampling one drawn draft gets on a high-entropy p (mmspec.verify.TreeVerifier).

`TreeDrafter` wraps a chain drafter that can grow such trees (`grow_tree`: the EAGLE head).
"""
from __future__ import annotations

from typing import Protocol

from mmspec.drafters.base import Drafter
from mmspec.state import DecodeState
from mmspec.steps import CHAIN, TOKEN_TREE, Draft, TokenTree, Window


class TreeGrower(Drafter, Protocol):
    def grow_tree(self, state: DecodeState, window: Window, nodes: int, top_k: int) -> "Draft | TokenTree":
        """A token tree of `nodes` nodes for a window of L (depth L-1), top_k children per expanded node, or the
        chain's draft where it has none to grow."""
        ...


class TreeDrafter:
    """A chain drafter that drafts a token tree of `nodes` nodes (top_k children per expanded node) in every
    window instead of its chain (a chain where the head has nothing to grow a tree from yet)."""

    makes = frozenset({CHAIN, TOKEN_TREE})

    def __init__(self, chain: TreeGrower, nodes: int, top_k: int):
        self.chain, self.nodes, self.top_k = chain, nodes, top_k

    def start(self, state, context):
        self.chain.start(state, context)

    def propose(self, state, window):
        return self.chain.grow_tree(state, window, self.nodes, self.top_k)

    def update(self, state, draft, verdict, logp, k):
        self.chain.update(state, draft, verdict, logp, k)

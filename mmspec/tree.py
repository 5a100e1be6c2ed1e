"""Windows as trees: one forward verifies the window's chain and proactive branches beside it.

A window of W nodes is fed as one [B, W] block. Node w holds the token at generated index
start + offset[w] (its RoPE position) and sits in cache slot start + w; it attends to everything
before the window and to the window nodes visible[w] (its ancestors and itself). A plain window is
the chain offset = 0..L-1 with a causal mask.

Proactive drafting (SJD-PAC) adds, after the chain's L nodes, S branches of depth D: branch i is a
sibling of the chain's first draft (offset 1, beside it) followed by D-1 children at offsets
2..D, so whichever of the alternatives the verifier accepts at the first slot, the target has
already seen what follows it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch


@dataclass(frozen=True)
class Tree:
    offset: torch.Tensor  # [W] long: node w stands at generated index start + offset[w]
    visible: torch.Tensor  # [W, W] bool: node w attends to node v (inside the window)
    chain: int  # L: nodes 0..L-1 are the window's chain
    depth: int  # D: nodes L + i * D + t are branch i's nodes, t = 0..D-1

    @property
    def width(self) -> int:
        return self.offset.shape[0]

    def path(self, branch: torch.Tensor) -> torch.Tensor:
        """[B] branch taken (0: the chain, i >= 1: branch i-1) -> [B, D] nodes that hold offsets 1..D on that path."""
        t = torch.arange(self.depth, device=branch.device)
        return torch.where(branch[:, None] > 0, self.chain + (branch[:, None] - 1) * self.depth + t, 1 + t)


def proactive_tree(length: int, branches: int, depth: int, device) -> Tree:
    """The chain of `length` nodes and `branches` branches of `depth` nodes rooted at node 0."""
    return _tree(length, branches, depth, str(device))


def forest(branches: int, depth: int, device) -> Tree:
    """`branches` chains of `depth` nodes side by side, each at offsets 0..depth-1 and seeing only itself (a draft
    model continuing each sibling at once)."""
    return _forest(branches, depth, str(device))


@lru_cache(maxsize=64)
def _forest(branches: int, depth: int, device: str) -> Tree:
    offset = torch.arange(depth).repeat(branches)
    visible = torch.block_diag(*[torch.ones(depth, depth, dtype=torch.bool).tril()] * branches)
    return Tree(offset.to(device), visible.to(device), 0, depth)


@lru_cache(maxsize=64)
def _tree(length: int, branches: int, depth: int, device: str) -> Tree:
    if depth > length - 1:
        raise ValueError(f"a branch of depth {depth} needs a window of at least {depth + 1} positions, got {length}")
    width = length + branches * depth
    offset = torch.cat([torch.arange(length), (torch.arange(depth) + 1).repeat(branches)])  # [W]
    visible = torch.zeros(width, width, dtype=torch.bool)
    visible[:length, :length] = torch.ones(length, length, dtype=torch.bool).tril()
    for i in range(branches):
        first = length + i * depth
        nodes = slice(first, first + depth)
        visible[nodes, 0] = True  # the last committed token
        visible[nodes, nodes] = torch.ones(depth, depth, dtype=torch.bool).tril()
    return Tree(offset.to(device), visible.to(device), length, depth)

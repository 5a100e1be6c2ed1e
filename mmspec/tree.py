"""Windows as trees: one forward verifies the window's chain and proactive branches beside it.

A window of W nodes is fed as one [B, W] block. Node w holds the token at generated index
start + offset[w] (its RoPE position) and sits in cache slot start + w; it attends to everything
before the window and to the window nodes visible[w] (its ancestors and itself). A plain window is
the chain offset = 0..L-1 with a causal mask.

Proactive drafting (SJD-PAC) adds, after the chain's L nodes, S branches of depth D: branch i is a
sibling of the chain's first draft (offset 1, beside it) followed by D-1 children at offsets
2..D, so whichever of the alternatives the verifier accepts at the first slot, the target has
already seen what follows it.

A token tree (EAGLE-2, mmspec.drafters.tree) is per row: node 0 is the last committed token and nodes
1..N each have a parent before them and stand one index after it; offset [B, W] and visible [B, W, W]
differ from row to row (`token_tree`), and `rows` repeats them for CFG's null rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch


@dataclass(frozen=True)
class Tree:
    offset: torch.Tensor  # [W] long, or per row [B, W]: node w stands at generated index start + offset[w]
    # [W, A] bool, or per row [B, W, A]: node w attends to the a-th of the A slots that end with the forward's last
    # (A = W: the window's own nodes; a draft head's tree level also sees the levels before it in its cache)
    visible: torch.Tensor
    chain: int  # L: nodes 0..L-1 are the window's chain
    depth: int  # D: nodes L + i * D + t are branch i's nodes, t = 0..D-1 (a token tree: its deepest level)

    def rows(self, R: int) -> "Tree":
        """The tree for R = c * B rows (CFG's null rows after the others): a per-row tree's rows repeated c times."""
        if self.visible.dim() == 2 or self.visible.shape[0] == R:
            return self
        c = R // self.visible.shape[0]
        offset = self.offset if self.offset.dim() == 1 else self.offset.repeat(c, 1)
        return Tree(offset, self.visible.repeat(c, 1, 1), self.chain, self.depth)

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
    W = length + branches * depth
    offset = torch.cat([torch.arange(length), (torch.arange(depth) + 1).repeat(branches)])  # [W]
    visible = torch.zeros(W, W, dtype=torch.bool)
    visible[:length, :length] = torch.ones(length, length, dtype=torch.bool).tril()
    for i in range(branches):
        first = length + i * depth
        nodes = slice(first, first + depth)
        visible[nodes, 0] = True  # the last committed token
        visible[nodes, nodes] = torch.ones(depth, depth, dtype=torch.bool).tril()
    return Tree(offset.to(device), visible.to(device), length, depth)


def token_tree(parent: torch.Tensor, depth: torch.Tensor, deepest: int) -> Tree:
    """Nodes 1..N of a token tree by their parents [B, N] (node numbers, 0 the root: the last committed token; a
    parent comes before its children) and depths [B, N] (1..deepest) -> the forward's tree of W = 1 + N nodes:
    node w at offset depth[w], seeing its ancestors and itself."""
    B, N = parent.shape
    parent = torch.cat([parent.new_zeros(B, 1), parent], 1)  # [B, W]: the root is its own parent
    own = torch.eye(N + 1, dtype=torch.bool, device=parent.device).expand(B, -1, -1)  # [B, W, W]
    visible = own
    for _ in range(deepest):  # each pass adds one generation of ancestors: a node sees what its parent sees
        visible = own | visible.gather(1, parent[..., None].expand(-1, -1, N + 1))
    return Tree(torch.cat([depth.new_zeros(B, 1), depth], 1), visible, 1, deepest)


def best_nodes(score: torch.Tensor, parent: torch.Tensor, nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """EAGLE-2's rerank: candidates [B, M] in order of depth with their cumulative scores (log confidence along the
    path) and parents (candidate index, -1: the root) -> the `nodes` best, as candidate indices in their order
    [B, N] (parents before children), and their parents as node numbers [B, N] (0 the root, i + 1 the i-th
    chosen). A child never scores above its parent, and a stable sort keeps a tie's parent (an earlier candidate)
    first, so every chosen node's parent is chosen too."""
    B, M = score.shape
    chosen = score.sort(dim=1, descending=True, stable=True).indices[:, :nodes].sort(1).values  # [B, N]
    number = torch.zeros(B, M, dtype=torch.long, device=score.device)  # candidate -> node number
    number.scatter_(1, chosen, torch.arange(1, chosen.shape[1] + 1, device=score.device).expand(B, -1))
    up = parent.gather(1, chosen)  # [B, N]
    return chosen, torch.where(up < 0, 0, number.gather(1, up.clamp(min=0)))

"""What one decode step passes between drafter, verifier and loop: plain, frozen records, no behaviour."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import torch

from mmspec.adapters.rows import Rows
from mmspec.tree import Tree


# the kinds of draft record, along one axis: a chain, a chain with proactive branches, a token tree
CHAIN, BRANCHES, TOKEN_TREE = "chain", "branches", "token tree"


class DraftRecord(Protocol):
    """What every draft record offers the loop, the executor and the verifiers, so that none tells them apart by
    class: a chain (`Draft`), a chain with proactive branches (`TreeDraft`) or a token tree (`TokenTree`)."""

    kind: str  # CHAIN, BRANCHES or TOKEN_TREE

    @property
    def tree(self) -> "Tree | None":
        """The forward's nodes beyond a chain (its W positions and their visibility); None for a chain."""

    @property
    def slots(self) -> int:
        """D = L-1: the window's draft slots (a token tree's deepest level)."""

    @property
    def chain(self) -> "Draft | None":
        """The chain of drafts drawn with their laws (a Draft itself, a TreeDraft's); None for a token tree."""

    def nodes(self) -> torch.Tensor:
        """[B, W-1] the tokens the target forward sees after the last committed token."""


@dataclass(frozen=True)
class Draft:
    """L-1 draft tokens for the window, each with the law q it was drawn from given everything before it.

    A token that was copied, looked up, chosen at random or forced was not drawn from a law that
    depends on the future, so its q is one-hot on itself: such slots are marked in `onehot` and
    their q is never stored (vLLM passes no draft probabilities for n-gram drafts either).
    """

    kind: ClassVar[str] = CHAIN
    tokens: torch.Tensor  # [B, D] drafts for indices n .. n+D-1 (D = L-1)
    q: torch.Tensor | None  # [B, D, V] fp32, read only where `onehot` is False; None when every slot is one-hot
    onehot: torch.Tensor  # [B, D] bool: q is one-hot on the token

    @classmethod
    def copied(cls, tokens: torch.Tensor) -> "Draft":
        """Drafts whose q is one-hot everywhere (lookup, fill policies, no drafts at all)."""
        return cls(tokens, None, torch.ones_like(tokens, dtype=torch.bool))

    @property
    def tree(self) -> Tree | None:
        """The forward's nodes beyond the chain: none for a chain."""
        return None

    @property
    def slots(self) -> int:
        """D = L-1: the window's draft slots."""
        return self.tokens.shape[1]

    @property
    def chain(self) -> "Draft":
        """The chain of drafts: this one."""
        return self

    def nodes(self) -> torch.Tensor:
        """[B, L-1] the draft tokens the target forward sees after the last committed token."""
        return self.tokens


@dataclass(frozen=True)
class TreeDraft:
    """A chain draft with proactive branches beside it (mmspec.drafters.proactive, mmspec.tree).

    Branch i is a sibling of the chain's draft at slot 0 (another candidate for the same index), then children
    for slots 1..D-1. How the candidates were drawn is the branch kind's business; the verifier needs only
    their laws: siblings without replacement from slot 0's q (rejection verifiers), children from `branch_q`
    or, where it is None, the chain's q of the same slot (its own token where that is one-hot).
    """

    kind: ClassVar[str] = BRANCHES
    chain: Draft
    branches: torch.Tensor  # [B, S, D]
    branch_q: torch.Tensor | None  # [B, S, D-1, V] fp32: each branch's children's own laws (a draft model), or None
    tree: Tree  # the forward's nodes: the chain's L, then S * D branch nodes

    @property
    def slots(self) -> int:
        """D = L-1: the chain's draft slots."""
        return self.chain.slots

    def nodes(self) -> torch.Tensor:
        """[B, L-1 + S * D] the chain's drafts, then every branch's nodes."""
        return torch.cat([self.chain.tokens, self.branches.flatten(1)], 1)


@dataclass(frozen=True)
class TokenTree:
    """Draft tokens as a tree whose children were chosen, not drawn (EAGLE-2: the head's most confident
    continuations, mmspec.drafters.tree), for indices n .. n+D-1 of a window of L = D + 1.

    Node 0 is the last committed token; node w (1..N) holds a token for index n - 1 + depth, one after its
    parent's. No node has a q: the verifier takes AR's draw at each node of the path (argmax(log p + g) on the
    index's noise row) and follows the child that equals it (mmspec.verify.TreeVerifier), so what is committed is
    AR's tokens whatever the tree holds.
    """

    kind: ClassVar[str] = TOKEN_TREE
    tokens: torch.Tensor  # [B, N] the nodes' tokens
    parent: torch.Tensor  # [B, N] each node's parent (0: the root), parents before children
    tree: Tree  # per row: offset [B, 1 + N] (each node's depth), visible [B, 1 + N, 1 + N] (ancestors and itself)

    @property
    def slots(self) -> int:
        """D = L-1: the deepest level a row may have (the verdict's slots less the bonus)."""
        return self.tree.depth

    @property
    def chain(self) -> None:
        """No chain: every node was chosen, none drawn."""
        return None

    def nodes(self) -> torch.Tensor:
        """[B, N] every node after the last committed token."""
        return self.tokens


@dataclass(frozen=True)
class Window:
    """One step's window, built once by the loop before anything is drafted and handed down to the drafter and the
    executor: L the positions asked for (the policy's, or widened over a run of forced tokens and the token after
    it: `widened`), D = L - 1 the draft slots to fill, and whether the batch's rows may stay in step (`in_step`). A
    drafter may draft fewer slots (`DraftRecord.slots`, a lookup with nothing to look up): the step verifies as many
    plus one, padded back towards L where it is compiled (mmspec.executor)."""
    L: int
    widened: bool = False
    in_step: bool = False

    @property
    def D(self) -> int:
        return self.L - 1

    def asking(self, L: int) -> "Window":
        """The same step's window asking for L positions (a drafter that asks a part of it for fewer)."""
        return dataclasses.replace(self, L=L)


@dataclass(frozen=True)
class Verdict:
    y: torch.Tensor  # [B, L] output at every slot: accepted draft, correction, or bonus
    accepted: torch.Tensor  # [B, L-1] bool: draft j passed its own test
    index: torch.Tensor  # [B, L] the generated position of each slot (what its noise row belongs to)
    gumbel_max: torch.Tensor | None = None  # [B, L] argmax(log p + g) at every slot, if the verifier drew it
    branch: torch.Tensor | None = None  # [B] with a tree draft: the path committed (0 chain, i branch i-1)
    path: torch.Tensor | None = None  # [B, D] with a tree draft: the forward's nodes that hold indices n..n+D-1


@dataclass(frozen=True)
class Context:
    """What drafters may need beyond the decode state, given once at `start`: the target's condition and the
    rows per condition (a draft model conditions on them), the prompt's ids in the target vocabulary (n-gram
    lookup), the ids random drafts come from (e.g. only visual tokens; None: all), the target's session (a
    draft head reads its features and embeddings) and the rows still generating (`rows`, the loop's: a session a
    drafter opens itself runs only them once narrowed to them, `rows.narrow(session)`; the target's session comes
    narrowed already)."""

    session: Any = None
    condition: Any = None
    num_samples: int = 1
    prompt: list[torch.Tensor] | None = None
    draft_vocab: torch.Tensor | None = None
    rows: Rows = field(default_factory=lambda: Rows(1))  # (a batch of one: no row ever leaves)

"""What one decode step passes between drafter, verifier and loop: plain records, no behaviour."""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Draft:
    """L-1 draft tokens for the window, each with the law q it was drawn from given everything before it.

    A token that was copied, looked up, chosen at random or forced was not drawn from a law that
    depends on the future, so its q is one-hot on itself: such slots are marked in `onehot` and
    their q is never stored (vLLM passes no draft probabilities for n-gram drafts either).
    """

    tokens: torch.Tensor  # [B, W] drafts for indices n .. n+W-1 (W = L-1)
    q: torch.Tensor | None  # [B, W, V] fp32, read only where `onehot` is False; None when every slot is one-hot
    onehot: torch.Tensor  # [B, W] bool: q is one-hot on the token
    # [B, S, D] proactive branches (mmspec.tree): branch i is a sibling of the draft at slot 0 (drawn without
    # replacement from its q, the slot-0 draft excluded), then children for slots 1..D-1, each drawn from that
    # slot's q (or the slot's own token where q is one-hot); None: the chain alone
    branches: torch.Tensor | None = None
    # [B, S, D-1, V] fp32: the law each branch's children were drawn from, when a drafter continues every sibling
    # itself (a draft model); None: the chain's q of the same slot
    branch_q: torch.Tensor | None = None
    # [B] how many drafts of each row, from slot 0, carry evidence (a matched n-gram) rather than guesses; the loop
    # then verifies only as many slots as the best row needs; None: every slot is worth its place in the forward
    useful: torch.Tensor | None = None

    @classmethod
    def copied(cls, tokens: torch.Tensor) -> "Draft":
        """Drafts whose q is one-hot everywhere (lookup, fill policies, no drafts at all)."""
        return cls(tokens, None, torch.ones_like(tokens, dtype=torch.bool))


@dataclass
class Verdict:
    y: torch.Tensor  # [B, L] output at every slot: accepted draft, correction, or bonus
    accepted: torch.Tensor  # [B, L-1] bool: draft j passed its own test
    index: torch.Tensor  # [B, L] the generated position of each slot (what its noise row belongs to)
    gumbel_max: torch.Tensor | None = None  # [B, L] argmax(log p + g) at every slot, if the verifier drew it
    branch: torch.Tensor | None = None  # [B] with proactive branches: the path committed (0 chain, i branch i-1)

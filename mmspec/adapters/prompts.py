"""Prompt ids for prefix-conditioned targets: normalise what users pass, and left-pad a ragged batch."""
from __future__ import annotations

import torch


def prompt_ids(prompts, what: str = "prompt", tokenizer=None) -> list[torch.Tensor]:
    """One prompt or a batch (token-id lists, a [C, P] tensor, or strings with a tokenizer) -> 1D id tensors."""
    if isinstance(prompts, torch.Tensor):
        prompts = list(prompts if prompts.dim() == 2 else prompts[None])
    elif isinstance(prompts, str) or (isinstance(prompts, (list, tuple)) and prompts and isinstance(prompts[0], int)):
        prompts = [prompts]
    out = []
    for p in prompts:
        if isinstance(p, str):
            if tokenizer is None:
                raise ValueError(f"a string {what} needs a tokenizer")
            p = tokenizer(p, return_tensors="pt").input_ids[0]
        out.append(torch.as_tensor(p, dtype=torch.long).flatten())
    if not out or any(len(p) == 0 for p in out):
        raise ValueError(f"every {what} needs at least one token id")
    return out


def left_pad(prompts: list[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged 1D prompts -> ids [B, P] left-padded, and lengths [B]."""
    lengths = torch.tensor([len(p) for p in prompts])
    if (lengths == 0).any():
        raise ValueError("every prompt needs at least one token (e.g. BOS)")
    ids = torch.full((len(prompts), int(lengths.max())), pad_id, dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, ids.shape[1] - len(p):] = p
    return ids, lengths

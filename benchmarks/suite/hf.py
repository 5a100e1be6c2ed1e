"""transformers baselines for text: `generate`, assisted generation with the draft model, and prompt lookup,
run on the very models a TextPipeline wraps and fed the same prompt ids."""
from __future__ import annotations

import torch

PROMPT_LOOKUP_TOKENS = 10  # the value transformers' documentation uses


def generation_config(pipeline, baseline: str, sampling: dict, max_new_tokens: int):
    """The transformers GenerationConfig for a baseline, with exactly mmspec's sampling: transformers' own
    defaults (top_k 50) would otherwise cut the distribution further than mmspec's p."""
    from transformers import GenerationConfig

    if baseline not in ("generate", "assisted", "prompt-lookup"):
        raise ValueError(f"unknown transformers baseline {baseline!r}: generate, assisted or prompt-lookup")
    config = pipeline.target.model.generation_config
    greedy = sampling.get("temperature", 1.0) == 0
    # greedy: the neutral values, or transformers fills in the checkpoint's and warns that they are unused
    options = {"temperature": 1.0, "top_p": 1.0} if greedy else {
        "temperature": sampling.get("temperature", 1.0), "top_k": sampling.get("top_k") or 0,
        "top_p": sampling.get("top_p") or 1.0}
    if baseline == "prompt-lookup":
        options["prompt_lookup_num_tokens"] = PROMPT_LOOKUP_TOKENS
    return GenerationConfig(do_sample=not greedy, max_new_tokens=max_new_tokens, eos_token_id=config.eos_token_id,
                            pad_token_id=_pad_id(config), **options)


def _pad_id(config) -> int:
    pad = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
    pad = pad[0] if isinstance(pad, list) else pad
    return 0 if pad is None else pad


def hf_generate(pipeline, ids: list[torch.Tensor], baseline: str, sampling: dict, max_new_tokens: int,
                seed: int) -> list[torch.Tensor]:
    """ids: one 1D prompt tensor per row -> the new tokens per row, up to and including the first EOS (what
    mmspec keeps), from `model.generate` on one left-padded batch."""
    model = pipeline.target.model
    config = generation_config(pipeline, baseline, sampling, max_new_tokens)
    longest = max(len(p) for p in ids)
    device = next(model.parameters()).device
    input_ids = torch.full((len(ids), longest), config.pad_token_id, dtype=torch.long)  # [B, P] left-padded
    mask = torch.zeros_like(input_ids)
    for row, p in enumerate(ids):
        input_ids[row, longest - len(p):], mask[row, longest - len(p):] = p, 1
    extra = {"assistant_model": pipeline.draft_model.model} if baseline == "assisted" else {}
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(input_ids.to(device), attention_mask=mask.to(device), generation_config=config, **extra)
    eos = torch.as_tensor(model.generation_config.eos_token_id if model.generation_config.eos_token_id is not None
                          else [], dtype=torch.long).flatten()
    return [_until_eos(row, eos) for row in out[:, longest:].cpu()]


def _until_eos(tokens: torch.Tensor, eos: torch.Tensor) -> torch.Tensor:
    """[T] generated ids (padded after EOS) -> up to and including the first EOS."""
    hits = torch.isin(tokens, eos).nonzero()
    return tokens[: int(hits[0]) + 1] if len(hits) else tokens


def describe(baseline: str) -> str:
    """How a baseline is configured, for the report."""
    if baseline == "assisted":
        return "model.generate(assistant_model=the draft model), drafting at transformers' default settings"
    if baseline == "prompt-lookup":
        return f"prompt_lookup_num_tokens={PROMPT_LOOKUP_TOKENS}"
    return "model.generate"

"""Any transformers causal LM (Llama, GPT-2, Qwen...) as a text target, from a local folder or object."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from mmspec.adapters.hf import HFSession, left_pad, prompt_ids
from mmspec.layouts import Layout, Sequence1D
from mmspec.stats import Stats


class HFCausalLM:
    """Conditioned on prompts: token-id lists / tensors, or strings when a tokenizer is given."""

    def __init__(self, model, tokenizer=None):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.vocab_size = model.get_output_embeddings().weight.shape[0]

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32, device="cpu",
                        trust_remote_code: bool = False):
        from mmspec.adapters.loading import load_causal_lm

        model, tokenizer = load_causal_lm(path, dtype=dtype, trust_remote_code=trust_remote_code)
        return cls(model.to(device), tokenizer)

    @property
    def default_sampling(self) -> dict:
        """The sampling the checkpoint's generation_config asks for (its explicitly set values only)."""
        config = self.model.generation_config
        if not config.do_sample:
            return {"temperature": 0.0}
        given = config.to_diff_dict()
        return {k: given[k] for k in ("temperature", "top_k", "top_p") if given.get(k) is not None}

    @property
    def eos_token_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id
        return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)

    def encode(self, prompts) -> list[torch.Tensor]:
        if self.tokenizer is None and (isinstance(prompts, str) or (isinstance(prompts, list) and prompts
                                                                     and isinstance(prompts[0], str))):
            raise ValueError("string prompts need a tokenizer: HFCausalLM(model, tokenizer)")
        return prompt_ids(prompts, tokenizer=self.tokenizer)

    def session(self, condition, layout: Layout, *, cfg: bool, num_samples: int = 1, max_window: int = 1):
        if cfg:
            raise ValueError("text models have no null condition here: CFG (cfg_scale != 1) is not supported")
        if not isinstance(layout, Sequence1D):
            raise ValueError(f"a text model generates a Sequence1D, not {layout!r}")
        prompts = [p for p in self.encode(condition) for _ in range(num_samples)]
        ids, lengths = left_pad(prompts, pad_id=0)
        device = self.model.get_input_embeddings().weight.device
        with torch.no_grad():
            prefix = self.model.get_input_embeddings()(ids.to(device))
        return _TextSession(self.model, prefix, lengths, prompts, layout.length + max_window)


class _TextSession(HFSession):
    def __init__(self, model, prefix, lengths, prompts, max_new):
        self.model = model
        config = model.config.get_text_config()
        with torch.no_grad():
            super().__init__(prefix, lengths, len(prompts), False, config, max_new,
                             model.get_output_embeddings().weight.shape[0])
        self.prompt = [p.to(self.device) for p in prompts]

    def embed(self, tokens):
        return self.model.get_input_embeddings()(tokens)

    def logits(self, h, positions, slots):
        return self.run(self.model, h, positions, slots).logits


@dataclass
class TextGeneration:
    texts: list[str]  # generated text per row (prompt excluded, stop string included)
    tokens: list[torch.Tensor]  # generated ids per row
    stats: Stats


def generate_text(target: HFCausalLM, prompts, max_new_tokens: int = 64, *, stop_strings: Sequence[str] = (),
                  stream: Callable[[int, str], None] | None = None, on_commit=None, **options) -> TextGeneration:
    """Speculative text generation: stops at EOS or a stop string, per row; `stream(row, text)` gets
    each row's new text as soon as it is committed. Other options go to `mmspec.generate`."""
    from mmspec.api import generate

    if target.tokenizer is None:
        raise ValueError("generate_text needs a tokenizer: HFCausalLM(model, tokenizer)")
    decode = lambda ids: target.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    shown: dict[int, int] = {}

    def hook(state, k):
        for row in k.nonzero().flatten().tolist():
            n = int(state.n[row])
            text = decode(state.seq[row, :n].tolist())
            hits = [text.find(s) + len(s) for s in stop_strings if s in text]
            if hits:  # keep the fewest tokens whose text reaches the earliest stop string
                end = min(hits)
                n = next(m for m in range(1, n + 1) if len(decode(state.seq[row, :m].tolist())) >= end)
                state.finish(row, n)
                text = decode(state.seq[row, :n].tolist())
            if stream is not None and len(text) > shown.get(row, 0):
                stream(row, text[shown.get(row, 0):])
                shown[row] = len(text)
        if on_commit is not None:
            on_commit(state, k)

    out = generate(target, prompts, Sequence1D(max_new_tokens), stop_tokens=target.eos_token_ids or None,
                   on_commit=hook, **options)
    tokens = [row[:n] for row, n in zip(out.tokens, out.lengths.tolist())]
    return TextGeneration([decode(t.tolist()) for t in tokens], tokens, out.stats)

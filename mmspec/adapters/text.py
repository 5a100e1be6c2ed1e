"""Any transformers causal LM (Llama, GPT-2, Qwen...) as a text target, from a local folder or object."""
from __future__ import annotations

from pathlib import Path

import torch

from mmspec.adapters.hf import HFSession, decoder_shape
from mmspec.adapters.llama import LeanLlama
from mmspec.adapters.prompts import prompt_ids
from mmspec.layouts import Layout, Sequence1D
from mmspec.memory import Shape


class HFCausalLM:
    """Conditioned on prompts: token-id lists / tensors, or strings when a tokenizer is given."""

    def __init__(self, model, tokenizer=None):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.vocab_size = model.get_output_embeddings().weight.shape[0]
        self.lean = LeanLlama.of(model)  # a plain Llama runs mmspec's lean forward of it; others, their own

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32, device="cpu",
                        trust_remote_code: bool = False):
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        from mmspec.loading import load_pretrained

        model = load_pretrained(AutoModelForCausalLM, path, "causal LM", dtype, trust_remote_code,
                                None if trust_remote_code else set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), device)
        tokenizer = None
        if any(Path(path).glob("tokenizer*")):
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
        return cls(model, tokenizer)

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

    def memory_shape(self, condition, layout: Layout) -> Shape:
        """The decoder's sizes and the longest prompt's tokens (the prompts are left-padded to it)."""
        embedding = self.model.get_input_embeddings().weight
        return decoder_shape(self.model.config.get_text_config(), self.vocab_size,
                             max(len(p) for p in self.encode(condition)), embedding.element_size())

    def session(self, condition, layout: Layout, *, cfg: bool, num_samples: int = 1, max_window: int = 1):
        if cfg:
            raise ValueError("text models have no null condition here: CFG (cfg_scale != 1) is not supported")
        if not isinstance(layout, Sequence1D):
            raise ValueError(f"a text model generates a Sequence1D, not {layout!r}")
        return _TextSession(self.model, self.encode(condition), num_samples, layout, max_window, lean=self.lean)


class _TextSession(HFSession):
    def __init__(self, model, prompts, num_samples, layout, max_window, lean: "LeanLlama | None" = None):
        self.model = model
        super().__init__(prompts, None, num_samples, embedding=model.get_input_embeddings(),
                         text_config=model.config.get_text_config(), layout=layout, max_window=max_window,
                         vocab_size=model.get_output_embeddings().weight.shape[0], prompt_in_vocab=True, lean=lean)

    def embed(self, tokens):
        return self.model.get_input_embeddings()(tokens)

    def logits(self, h, positions, view):
        return self.run(self.model, h, positions, view).logits if self.lean is None else self.run_lean(h, positions, view)

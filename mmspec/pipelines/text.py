"""Text generation over a transformers causal LM: `generate_text` (EOS, stop strings, streaming) and the
TextPipeline over a model folder (the bundled code-text model by default)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable, Sequence

import torch

from mmspec.adapters.text import HFCausalLM
from mmspec.api import generate
from mmspec.arguments import check_arguments
from mmspec.layouts import Sequence1D
from mmspec.pipelines.base import DEFAULT_METHOD, DEFAULT_WINDOW, Pipeline, as_list, model_path
from mmspec.pipelines.files import numbered, write_file
from mmspec.pipelines.prompts import check_prompt
from mmspec.stats import Stats
from mmspec.threads import module_device, scoped
from mmspec.window import WindowCache


@dataclass
class TextGeneration:
    texts: list[str]  # generated text per row (prompt excluded, stop string included)
    tokens: list[torch.Tensor]  # generated ids per row
    stats: Stats


def generate_text(target: HFCausalLM, prompts, max_new_tokens: int = 64, *, stop_strings: Sequence[str] = (),
                  stream: Callable[[int, str], None] | None = None, on_commit=None, room: "int | None" = None,
                  **options) -> TextGeneration:
    """Speculative text generation: stops at EOS or a stop string, per row; `stream(row, text)` gets
    each row's new text as soon as it is committed. `room`: decode in a layout of that many tokens, each row ended at
    `max_new_tokens`, so that calls asking for other counts share its engine (a method whose tokens do not depend on
    the windows: `Method.same_tokens`; with another, the windows past `max_new_tokens` would change them). Other
    options go to `mmspec.generate`."""
    if target.tokenizer is None:
        raise ValueError("generate_text needs a tokenizer: HFCausalLM(model, tokenizer)")
    room = max_new_tokens if room is None else room
    if room < max_new_tokens:
        raise ValueError(f"room must be at least max_new_tokens ({max_new_tokens}), got {room}")
    decode = lambda ids: target.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    shown: dict[int, int] = {}
    reads_text = bool(stop_strings) or stream is not None

    def hook(state, k):
        for row, (committed, n) in enumerate(torch.stack([k, state.n], 1).tolist()):  # (one read of the counts)
            if not committed:
                continue
            if n >= max_new_tokens and room > max_new_tokens:  # (in a longer layout: its own count reached)
                n = max_new_tokens
                state.finish(row, n)
            if not reads_text:
                continue
            text = decode(state.seq[row, :n].tolist())
            hits = [text.find(s) + len(s) for s in stop_strings if s in text]
            if hits:  # keep the fewest tokens whose text reaches the earliest stop string
                end = min(hits)
                n = next(m for m in range(1, n + 1) if len(decode(state.seq[row, :m].tolist())) >= end)
                state.finish(row, n)
                text = decode(state.seq[row, :n].tolist())
            key = state.row_ids[row]  # (the request's row: a large one runs in batches)
            if stream is not None and len(text) > shown.get(key, 0):
                stream(key, text[shown.get(key, 0):])
                shown[key] = len(text)
        if on_commit is not None:
            on_commit(state, k)

    # decoding every row's text after every step costs as much as a small model's forward: only when it is read
    watch = hook if reads_text or room > max_new_tokens else on_commit
    out = generate(target, prompts, Sequence1D(room), stop_tokens=target.eos_token_ids or None,
                   on_commit=watch, **options)
    tokens = [row[:n] for row, n in zip(out.tokens, out.lengths.tolist())]
    return TextGeneration([decode(t.tolist()) for t in tokens], tokens, out.stats)


@dataclass
class TextOutput:
    texts: list[str]  # completions, prompt-major
    prompts: list[str]
    tokens: list[torch.Tensor]  # generated ids per row
    stats: Stats
    summary: dict = field(default_factory=dict)

    def save(self, folder: "str | Path", stem: str = "text", overwrite: bool = False) -> list[Path]:
        """stem_000.txt... (prompt and completion); numbered after those already in `folder` unless `overwrite`."""
        Path(folder).mkdir(parents=True, exist_ok=True)
        paths = [p for p, in numbered(folder, stem, len(self.texts), ("txt",), overwrite)]
        return [write_file(path, lambda tmp, t=prompt + text: tmp.write_text(t), overwrite)
                for prompt, text, path in zip(self.prompts, self.texts, paths)]


class TextPipeline(Pipeline):
    kind, opens_families = "text", True
    default_model, default_draft = "code-text", "code-text-draft"
    # auto windows up to 8 (candidates 1, 4, 8): a draft head, a draft model and the n-gram lookup commit runs that
    # a cap of 6 cut short (code-text, 1 row, greedy: eagle 297 tokens/s at 8 against 273 at 4 and 6, lookup 299
    # against 278; 12 and 16 lose); Jacobi drafts rarely survive long on text, and their prior keeps them near AR
    default_window = 8

    def __init__(self, target: HFCausalLM, draft_model: "HFCausalLM | None" = None):
        super().__init__()
        self.target, self.draft_model = target, draft_model

    @property
    def default_sampling(self) -> dict:
        return self.target.default_sampling

    @classmethod
    def load_folder(cls, path: "str | Path | None" = None, device="cpu", dtype=torch.float32,
                    window_cache: "WindowCache | str | Path | None" = None, compile: "bool | dict" = False,
                    draft: "str | Path | None" = None):
        """draft: a draft model folder (the bundled model comes with its own)."""
        draft_path = draft if draft is not None else (cls.default_draft if path is None else None)
        path = model_path(path, cls.default_model)
        target = HFCausalLM.from_pretrained(path, dtype=dtype, device=device)
        draft_model = None
        if draft_path is not None:
            draft_model = HFCausalLM.from_pretrained(model_path(None, draft_path) if draft_path == cls.default_draft
                                                     else model_path(draft_path, ""), dtype=dtype, device=device)
        pipe = cls(target, draft_model)
        pipe.window_memory = WindowCache.coerce(window_cache).memories(path, device)
        pipe.folder, pipe.compile = path, compile
        return pipe

    @property
    def target_depth(self) -> int:
        return self.target.model.config.get_text_config().num_hidden_layers

    def _room(self, prompts: list[str], max_new_tokens: int) -> int:
        """The layout a call on shared engines decodes in where a row's tokens do not depend on the windows: the next
        power of two tokens (at least 16), within the model's context after the longest prompt, so that calls asking
        for counts in one such span share an engine (`share_engines`: a server's clients ask for what they like),
        each row ended at its own count with the tokens it gets alone (`generate_text`)."""
        room = max(16, 1 << (max_new_tokens - 1).bit_length())
        context = getattr(self.target.model.config.get_text_config(), "max_position_embeddings", None)
        if context is not None:
            room = min(room, context - max(len(ids) for ids in self.target.encode(prompts)))
        return max(room, max_new_tokens)  # (past the context: the session refuses the call, as it would alone)

    def _requests(self, prompts, max_new_tokens: int = 64, **call) -> list[tuple]:
        return [(self.target, prompts, Sequence1D(max_new_tokens), None)]

    @scoped(lambda self, *args, **kwargs: module_device(self.target))
    def __call__(self, prompt, num_outputs: int = 1, seed=0, method=DEFAULT_METHOD, window=DEFAULT_WINDOW,
                 sampling: "dict | None" = None, max_new_tokens: int = 64, stop_strings=(),
                 progress_bar: bool = False, stream=None, on_commit=None, compile=None,
                 batch_size: "int | None" = None) -> TextOutput:
        """stream(row, text) gets each row's new text as it is committed; on_commit(state, k) is called
        after every forward (see mmspec.generate); batch_size: mmspec.generate's."""
        prompts = as_list(prompt)
        check_arguments(num_outputs=num_outputs, on_commit=on_commit, compile=compile, progress_bar=progress_bar)
        for p in prompts:
            check_prompt(p)
        planned = self.plan(method, window)
        self.check_call(prompts, len(prompts) * num_outputs, batch_size, method=planned, sampling=sampling,
                        max_new_tokens=max_new_tokens)
        # (a longer layout costs a call alone its noise hashed ahead for positions it never reaches: 7-8% of `ar` at
        # 48 tokens, 1 and 8 rows; only calls that share engines gain from it)
        shares = self.engines is not None and planned.method.same_tokens
        room = self._room(prompts, max_new_tokens) if shares else None
        run = partial(generate_text, self.target, prompts, max_new_tokens, stop_strings=stop_strings, stream=stream,
                      seed=seed, num_outputs=num_outputs, batch_size=batch_size, room=room)
        out, summary = self._generate(run, total=len(prompts) * num_outputs * max_new_tokens, planned=planned,
                                      sampling=sampling, progress_bar=progress_bar, on_commit=on_commit,
                                      started=time.perf_counter(), compile=compile)
        return TextOutput(out.texts, [p for p in prompts for _ in range(num_outputs)], out.tokens, out.stats, summary)

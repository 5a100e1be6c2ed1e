"""What the image pipelines of the transformers families (Chameleon, Janus, Emu3) share: a call from prompts alone
(no given pictures) through their target, and pictures from the generated grid's cells. A family's pipeline says
how its folder loads, how prompts become its condition (`condition`) and how cells become pixels (`pictures`)."""
from __future__ import annotations

import time
from functools import partial
from pathlib import Path

from mmspec.api import generate
from mmspec.pipelines.base import DEFAULT_METHOD, DEFAULT_WINDOW, Pipeline, as_list
from mmspec.pipelines.outputs import ImageOutput, cells
from mmspec.pipelines.prompts import check_prompt
from mmspec.threads import module_device, scoped


def folder_tokenizer(path: Path, model: str, remedy: str):
    """The text tokenizer of a model folder (transformers' AutoTokenizer, its local files); a one-line refusal, before
    the model loads, when the folder has none: `model` names the model ("a Janus model"), `remedy` what to do."""
    if not any(path.glob("tokenizer*.json")):
        raise FileNotFoundError(f"{path} is {model} without its tokenizer (tokenizer.json): {remedy}")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


class PromptedImagePipeline(Pipeline):
    """prompt(s) -> PIL images; `num_outputs` images per prompt, at the family's default sampling merged with the
    call's. A subclass sets `target` (a session target), `layout`, `default_sampling`, and defines
    `condition(prompts)` (-> what mmspec.generate takes for its target), `pictures(grid)` ([B, h, w] the cells of
    generated tokens, -1 where none is yet -> PIL images) and `target_depth`."""

    kind, default_model = "image", None  # (no bundled model of these families: a folder is always named)

    def _requests(self, prompts, **call) -> list[tuple]:
        return [(self.target, self.condition(prompts), self.layout, None)]

    @scoped(lambda self, *args, **kwargs: module_device(self.target))
    def __call__(self, prompt, num_outputs: int = 1, seed=0, method=DEFAULT_METHOD, window=DEFAULT_WINDOW,
                 sampling: "dict | None" = None, progress_bar: bool = False, image=None, mask=None,
                 on_commit=None, compile=None, batch_size: "int | None" = None) -> ImageOutput:
        """on_commit(state, k) after every forward (see mmspec.generate); compile, batch_size: mmspec.generate's."""
        if image is not None or mask is not None:
            raise ValueError(f"{type(self).__name__} generates from a prompt alone (no image= or mask=)")
        prompts = as_list(prompt)
        for p in prompts:
            check_prompt(p)
        rows = [p for p in prompts for _ in range(num_outputs)]
        started = time.perf_counter()
        planned = self.plan(method, window)
        self.check_call(prompts, len(rows), batch_size, method=planned, sampling=sampling)
        run = partial(generate, self.target, self.condition(prompts), self.layout, seed=seed, num_outputs=num_outputs,
                      batch_size=batch_size)
        out, summary = self._generate(run, total=len(rows) * self.layout.length, planned=planned,
                                      sampling=sampling, progress_bar=progress_bar, on_commit=on_commit,
                                      started=started, compile=compile)
        return ImageOutput(self.pictures(cells(out.tokens, self.layout)), rows, out.tokens, out.stats, summary)

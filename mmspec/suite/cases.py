"""Suites as data: a suite is a list of cases; `mmspec.suite.run` has one function per kind of case."""
from __future__ import annotations

from dataclasses import dataclass

from mmspec.bench import PROMPTS, Entry

GRID_METHODS = ("jacobi", "coupled", "gumbel", "exact")
WINDOW_METHODS = ("coupled", "exact")
WINDOWS = {"image": (4, 8, 16, 32, 64), "video": (4, 8, 16, 32, 64, 128)}
# code prompts of different lengths, for ragged text batches (rows beyond these reuse them with other seeds)
TEXT_PROMPTS = PROMPTS["text"] + ["def is_prime(n):\n    if n < 2:\n        return False\n", "for i in range(",
                                  "import numpy as np\n\n\ndef normalize(x):\n    \"\"\"Scale x to unit norm.\"\"\"\n",
                                  "def main():\n", "with open(path) as f:\n    for line in f:\n        "]
GREEDY, SAMPLED = {"temperature": 0.0}, {"temperature": 0.8, "top_p": 0.95}  # text: the same on any model
TRANSFORMERS_PAIRS = {"ar": "generate", "draft-model": "assisted", "lookup": "prompt-lookup"}  # like for like


@dataclass(frozen=True)
class GridCase:
    """`ar` and each entry on `rows` rows of the image or video model, round-robin, best of `repeats`."""

    kind: str  # image | video
    rows: int
    entries: tuple[Entry, ...]
    sweep: str  # the axis this case is one point of: "rows" (batch size) or "window"
    repeats: int = 1


@dataclass(frozen=True)
class TextCase:
    """mmspec methods and transformers baselines (generate, assisted, prompt-lookup) on the same prompt ids,
    sampling and max_new_tokens: tokens per second of new tokens, best of `repeats` after one untimed run of
    each. `prompts` prompts of different lengths run in batches of `rows` (ragged when rows > 1)."""

    rows: int
    sampling: dict
    methods: tuple[str, ...]
    baselines: tuple[str, ...]
    prompts: int
    repeats: int = 2
    kind: str = "text"

    @property
    def greedy(self) -> bool:
        return self.sampling.get("temperature", 1.0) == 0


@dataclass(frozen=True)
class LosslessCase:
    """`exact` == `ar` token for token, and every entry at temperature 0 == `ar` at temperature 0 (`rows` prompts)."""

    kind: str
    rows: int
    entries: tuple[Entry, ...]


def auto_entry(kind: str) -> Entry:
    """What a pipeline runs when neither method nor window is named."""
    from mmspec.pipelines.base import DEFAULT_METHOD

    return Entry(DEFAULT_METHOD, "auto", label="auto")


def quick(rows: tuple[int, ...] = (1, 4, 8), kinds: tuple[str, ...] = ("image", "video", "text"),
          draft: bool = True) -> list:
    """Every method against `ar` at each batch size and against the window, text against transformers
    (batch 1, and one ragged batch of the largest size), and the lossless check on each model.
    draft: whether the text model has a draft model (draft-model and assisted generation need one)."""
    cases: list = []
    for kind in ("image", "video"):
        if kind not in kinds:
            continue
        entries = tuple(map(Entry, GRID_METHODS)) + (auto_entry(kind),)
        # one timed run where a run takes long enough to time (and the suite must fit in 10 minutes of one CPU
        # core), two for the short single-row runs
        cases += [GridCase(kind, n, entries, "rows", repeats=2 if n == 1 else 1) for n in rows]
        cases.append(GridCase(kind, 1, tuple(Entry(m, w) for w in WINDOWS[kind] for m in WINDOW_METHODS), "window"))
        cases.append(LosslessCase(kind, 2, entries[:-1] + (Entry("lookup"), entries[-1])))
    if "text" in kinds:
        pairs = {m: b for m, b in TRANSFORMERS_PAIRS.items() if draft or m != "draft-model"}
        batch = ("ar", "coupled", "lookup") + (("draft-model",) if draft else ())
        for sampling in (GREEDY, SAMPLED):
            cases.append(TextCase(1, sampling, tuple(pairs), tuple(pairs.values()), prompts=len(PROMPTS["text"])))
            if max(rows) > 1:  # assisted generation refuses batches: kept to record that it does
                cases.append(TextCase(max(rows), sampling, batch, ("generate",) + (("assisted",) if draft else ()),
                                      prompts=max(rows)))
        methods = GRID_METHODS + ("lookup",) + (("draft-model",) if draft else ())
        cases.append(LosslessCase("text", 2, tuple(map(Entry, methods)) + (auto_entry("text"),)))
    return cases


SUITES = {"quick": quick}

"""Suites as data: a suite is a list of cases; `benchmarks.suite.run` has one function per kind of case."""
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
# the high-entropy regime real image models sample in: temperature 1, no top-k / top-p, over the model's default
# (its CFG kept)
HOT = {"temperature": 1.0, "top_k": None, "top_p": None}
TRANSFORMERS_PAIRS = {"ar": "generate", "draft-model": "assisted", "lookup": "prompt-lookup"}  # like for like

# the acceptance suite: a method added on main is one more entry here, a name or {"name": ..., options}
# (e.g. {"name": "coupled", "init": "above"}); every grid method runs at every window of its kind
ACCEPTANCE_METHODS = ("jacobi", "coupled", "gumbel", "exact", "lookup", "pac", {"name": "exact", "proactive": [8, 3]})
TEXT_ACCEPTANCE_METHODS = ("draft-model", "lookup", {"name": "draft-model", "proactive": [8, 5]})
# where the model folder has a draft head (head/): the head alone, and at the first slot before a Jacobi window;
# on text also with proactive branches the head continues (3 siblings of slot 0, 4 deep)
HEAD_ACCEPTANCE_METHODS = ({"name": "eagle", "exact": True}, {"name": "eagle", "exact": True, "jacobi": 1})
TEXT_HEAD_ACCEPTANCE_METHODS = ("eagle", {"name": "eagle", "exact": True}, {"name": "eagle", "proactive": [4, 4]},
                                {"name": "eagle", "exact": True, "proactive": [4, 4]})
ACCEPTANCE_WINDOWS = {"image": (4, 8, 16, 32, 64), "video": (4, 8, 16, 32, 64, 128), "text": (4, 6, 8)}
# sweeps that stop where wider windows gain little, so that the suite fits in 10 minutes of one CPU core: the full
# sweep (benchmarks/results/acceptance-full/) took 786 s, with jacobi (SJD) at 1.82x / 1.93x on images at 32 / 64
# and 4.03x / 4.05x / 4.12x on video at 32 / 64 / 128 (about 150 s of runs past 32), and lookup at 1.22x / 1.29x
# / 1.42x on images and 1.48x / 1.50x / 1.53x on video at 4 / 8 / 16 (about 30 s at 16)
# a head alone drafts one token per head forward: its acceptance has gone to nothing well before 8 slots
WINDOW_CAPS = {"jacobi": 32, "lookup": 8, "eagle(exact=True)": 8}


def acceptance_windows(kind: str, spec: str | dict) -> tuple[int, ...]:
    """The windows a method spec runs at in the acceptance suite (capped by its label, else by its name)."""
    cap = WINDOW_CAPS.get(spec_label(spec), WINDOW_CAPS.get(Entry(spec).name))
    return tuple(w for w in ACCEPTANCE_WINDOWS[kind] if cap is None or w <= cap)


def prompts_for(kind: str, rows: int) -> list[str]:
    """`rows` prompts, cycling through the kind's set (rows beyond it differ by seed: `row_seeds`)."""
    pool = TEXT_PROMPTS if kind == "text" else PROMPTS[kind]
    return [pool[i % len(pool)] for i in range(rows)]


def row_seeds(seed: int, rows: int) -> list[int]:
    """Row i's seed, seed + i: `prompts_for` repeats prompts past its set, and a prompt with a seed gives one output
    (the seed rule of mmspec.generate), so rows tell themselves apart by seed."""
    return [seed + i for i in range(rows)]


def spec_label(spec: str | dict) -> str:
    """'coupled' -> 'coupled'; {'name': 'coupled', 'init': 'above'} -> 'coupled(init=above)'."""
    if isinstance(spec, str):
        return spec
    options = ", ".join(f"{k}={v}" for k, v in spec.items() if k != "name")
    return f"{spec['name']}({options})" if options else spec["name"]


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
    methods: tuple  # names, or bench Entries (a method with options, its window, a label)
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


@dataclass(frozen=True)
class CountCase:
    """Forward counts only, no timing: each entry (a method spec at a window; `ar` among them, for the ratios)
    on `prompts` prompts x `samples` samples, as one batch or, with `one_row`, each row alone (row r with seed
    + r, as in the batch). Every call's verifier is wrapped in benchmarks.suite.measure.MeasuringVerifier.
    sampling None: the model's default; over_default: sampling's keys replace those of the model's default (the
    rest, CFG among them, kept)."""

    kind: str
    prompts: int
    samples: int
    entries: tuple[Entry, ...]
    one_row: bool = False
    sampling: dict | None = None
    over_default: bool = False

    @property
    def rows(self) -> int:
        return self.prompts * self.samples


def auto_entry(kind: str) -> Entry:
    """What a pipeline runs when neither method nor window is named."""
    from mmspec.pipelines.base import DEFAULT_METHOD

    return Entry(DEFAULT_METHOD, "auto", label="auto")


def quick(rows: tuple[int, ...] = (1, 4, 8), kinds: tuple[str, ...] = ("image", "video", "text"),
          draft: bool = True, default_rows: tuple[int, ...] = (16,)) -> list:
    """Every method against `ar` at each batch size and against the window, text against transformers
    (batch 1, and one ragged batch of the largest size), and the lossless check on each model.
    draft: whether the text model has a draft model (draft-model and assisted generation need one).
    default_rows: larger batches where only the default (`auto`) runs against `ar`: fixed windows lose there on
    a CPU and take longest, and the default is what a render job runs."""
    cases: list = []
    for kind in ("image", "video"):
        if kind not in kinds:
            continue
        entries = tuple(map(Entry, GRID_METHODS)) + (auto_entry(kind),)
        # one timed run where a run takes long enough to time (and the suite must fit in 10 minutes of one CPU
        # core), two for the short single-row runs
        cases += [GridCase(kind, n, entries, "rows", repeats=2 if n == 1 else 1) for n in rows]
        cases += [GridCase(kind, n, entries[-1:], "rows", repeats=1) for n in default_rows if n not in rows]
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


def acceptance(kinds: tuple[str, ...] = ("image", "video", "text"), draft: bool = True,
               heads: tuple[str, ...] = ()) -> list:
    """Per kind: `ar` and every method at each of its windows on 4 prompts x 2 samples (one batch of 8 rows), then
    each method at the pipeline's default window on 2 prompts one row at a time (the issue's protocol; 2, not 4,
    to fit in 10 minutes of one CPU core: the quick suite's 1-row runs take 1); image and video then repeat those
    1-row runs at HOT (temperature 1, no top-k / top-p, the model's CFG kept), against `ar` at HOT. Text:
    code-text sampled at t 0.8, top-p 0.95, with its draft model when there is one (draft). heads: the kinds
    whose model has a draft head, which then runs too (HEAD_ACCEPTANCE_METHODS)."""
    from mmspec.pipelines import ImagePipeline, TextPipeline, VideoPipeline

    default = {"image": ImagePipeline, "video": VideoPipeline, "text": TextPipeline}
    cases = []
    for kind in kinds:
        methods = ACCEPTANCE_METHODS if kind != "text" else tuple(
            m for m in TEXT_ACCEPTANCE_METHODS if draft or Entry(m).name != "draft-model")
        if kind in heads:
            methods += HEAD_ACCEPTANCE_METHODS if kind != "text" else TEXT_HEAD_ACCEPTANCE_METHODS
        sampling = SAMPLED if kind == "text" else None
        sweep = tuple(Entry(m, w, f"{spec_label(m)} w={w}") for m in methods for w in acceptance_windows(kind, m))
        # 1-row runs at the pipeline's default window, or the widest below it that the method runs at
        single = tuple(Entry(m, w, f"{spec_label(m)} w={w}") for m in methods
                       for w in [max(w for w in acceptance_windows(kind, m) if w <= default[kind].default_window)])
        cases += [CountCase(kind, 4, 2, (Entry("ar"),) + sweep, sampling=sampling),
                  CountCase(kind, 2, 1, (Entry("ar"),) + single, one_row=True, sampling=sampling)]
        if kind != "text":
            cases.append(CountCase(kind, 2, 1, (Entry("ar"),) + single, one_row=True, sampling=HOT, over_default=True))
    return cases


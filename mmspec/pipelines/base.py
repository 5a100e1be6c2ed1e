"""What every pipeline shares: where the bundled models are, the window cache, and the call sequence around
mmspec.generate (method, window, sampling, progress, what auto windows learned, the summary)."""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from mmspec.api import row_need
from mmspec.engine import Engines
from mmspec.families import Family, load
from mmspec.memory import rows_at_once
from mmspec.methods import DEFAULT_METHOD, DEFAULT_WINDOW  # noqa: F401 - the pipelines' defaults
from mmspec.methods import OPTIONS, Method, Spec
from mmspec.pipelines.prompts import shorten
from mmspec.plan import Plan, plan
from mmspec.reference.eagle import EagleHead, load_head
from mmspec.sampling import merged
from mmspec.threads import module_device, scoped
from mmspec.window import AutoWindow, WindowCache, WindowMemories

HEAD = "head"  # a model folder's draft head for method eagle: <model>/head/ (mmspec train-head writes one)


def models_dir() -> Path:
    """Where the bundled models are: $MMSPEC_MODELS, else the models/ folder of the source checkout."""
    return Path(os.environ.get("MMSPEC_MODELS") or Path(__file__).resolve().parents[2] / "models")


def model_path(path: "str | Path | None", default: str) -> Path:
    """A model folder: the given path, or the bundled model `default` in the repository's models/."""
    path = Path(path) if path is not None else models_dir() / default
    if not path.is_dir():
        hint = ""
        if path.parent == models_dir():
            hint = (" (the bundled models ship in the models/ folder of the mmspec repository, not in the wheel: "
                    "install from a clone with `pip install -e .`, or set MMSPEC_MODELS=/path/to/mmspec/models, "
                    "or pass a model folder)")
        raise FileNotFoundError(f"no model folder at {path}{hint}")
    return path


def head_folder(model: "Path | None") -> Path:
    """The draft head of a model folder (its head/), which must be there: an eagle spec that names no head uses it."""
    if model is None:
        raise ValueError("method eagle needs a draft head: this pipeline has no model folder, so name one "
                         "({'name': 'eagle', 'head': FOLDER})")
    folder = model / HEAD
    if not folder.is_dir():
        raise FileNotFoundError(f"method eagle needs a draft head and {model} has no head/: train one with "
                                f"`mmspec train-head {model} --out {folder}`, or name a head folder "
                                "({'name': 'eagle', 'head': FOLDER}; the CLI's --head FOLDER)")
    return folder


@contextmanager
def progress(total: int, desc: str, enabled: bool):
    """A tqdm bar over committed tokens; yields the on_commit hook for mmspec.generate."""
    if not enabled:
        yield None
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, desc=desc, unit="tok", leave=False) as bar:
        yield lambda state, k: bar.update(int(k.sum()))


def chain(*hooks):
    """One on_commit hook that calls each given hook in turn; None when none is given."""
    hooks = [h for h in hooks if h is not None]
    if not hooks:
        return None

    def hook(state, k):
        for h in hooks:
            h(state, k)
    return hook


def as_list(prompt) -> list[str]:
    """A prompt or a list of prompts -> the list; anything else refused in one line that names `prompt` (pipe(None)
    said "'NoneType' object is not iterable")."""
    prompts = [prompt] if isinstance(prompt, str) else list(prompt) if isinstance(prompt, (list, tuple)) else None
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise TypeError(f"prompt must be a string or a non-empty list of strings, got {shorten(repr(prompt))}")
    return prompts


class Pipeline:
    """The call sequence the image, video and text pipelines share. A subclass sets `default_model` (a bundled
    model folder's name) and `default_window` (auto windows' widest), holds `target` (whose `model` has
    `target_depth` layers) and `default_sampling`, and may hold a `draft_model`: the model of a method that drafts
    with one and names none. A pipeline loaded from a model `folder` with a head/ gives that draft head to an
    eagle spec that names none. `_requests(prompts, **call)` gives the (target, condition, layout, given) of each
    generate call a call makes, for `check_call`."""

    kind: str  # what it generates: image, video or text (mmspec.families.KINDS)
    default_model: str
    default_window: int
    opens_families = False  # True: the kind's door, whose from_pretrained gives any family's pipeline of the kind
    family: "Family | None" = None  # the model folder's entry in mmspec.families (load sets it)
    draft_model = None
    folder: "Path | None" = None  # the model folder (from_pretrained sets it)
    compile: "bool | dict" = False  # a call's default for mmspec.generate's compile (from_pretrained sets it)
    engines: "Engines | None" = None  # shared by the calls made at once (share_engines)

    @classmethod
    @scoped("device")
    def from_pretrained(cls, path: "str | Path | None" = None, device="cpu", dtype=torch.float32,
                        window_cache=None, compile: "bool | dict" = False, **options):
        """The pipeline of a model folder (None: the bundled model of the kind), whatever its family (the table in
        mmspec.families says which pipeline runs it, and refuses in one line what it cannot run): window_cache: where
        auto windows' measurements are kept across processes (see WindowCache.coerce: None is $MMSPEC_WINDOW_CACHE or
        ~/.cache/mmspec/windows, 'off' nowhere); compile: mmspec.generate's default for the pipeline's calls;
        `options`: a family's own (text: draft, a draft model folder; Cosmos: allow_torchscript, to load its
        TorchScript tokenizer; Janus: img_size, the images' side in pixels as deepseek's `generate` takes it)."""
        return load(path, cls.kind, expect=cls, device=device, dtype=dtype, window_cache=window_cache,
                    compile=compile, **options)

    def __init__(self):
        self.window_memory = WindowMemories()  # window="auto" learns costs and acceptance across calls
        self.heads: dict[Path, EagleHead] = {}  # head folder -> its head, loaded when a spec first needs it

    def _at(self, path: Path, device, window_cache, compile: "bool | dict") -> "Pipeline":
        """This pipeline as loaded from the model folder `path` -> itself: auto windows start from what was measured
        on the folder (window_cache: see WindowCache.coerce), its head/ serves method eagle, `compile` is its calls'
        default."""
        self.window_memory = WindowCache.coerce(window_cache).memories(path, device)
        self.folder, self.compile = path, compile
        return self

    def share_engines(self, slots: int) -> None:
        """Calls made at once from several threads (a demo's visitors, a server's workers, a render job's outputs)
        run as rows of one decode per set of options, `slots` rows at a time, a row joining as another finishes
        (mmspec.engine.Engines); each call's outputs are the ones it gets alone. A model the pipeline calls for part
        of its work (a video's first frames) shares its own."""
        if self.engines is not None:
            self.engines.close()
        self.engines = Engines(slots)
        for part in self.parts():
            part.share_engines(slots)

    def parts(self) -> "list[Pipeline]":
        """The pipelines this one calls for part of a call's work."""
        return []

    @property
    def has_head(self) -> bool:
        """Whether the model folder has a draft head (head/), so that method eagle needs no head named."""
        return self.folder is not None and (self.folder / HEAD).is_dir()

    def resolve(self, method: "str | dict | Spec | Method") -> Method:
        """A method spec -> a Method, its resources bound: this pipeline's draft model, and a draft head (the model
        folder's head/ unless the spec names a head folder), loaded for this target the first time a spec needs
        it: its layers picked for the target's depth when its config names none, on the target's device and
        dtype."""
        if isinstance(method, Method):
            return method
        spec = Spec.parse(method)
        named = {k: self._head(Path(v)) for k, v in spec.options.items()
                 if OPTIONS[k].path and isinstance(v, (str, os.PathLike))}
        head = self._head(head_folder(self.folder)) if spec.needs == "head" else None
        return Spec(spec.name, {**spec.options, **named}).bind(model=self.draft_model, head=head)

    def _head(self, folder: Path) -> EagleHead:
        key = folder.resolve()
        if key not in self.heads:
            weight = next(self.target.model.parameters())
            self.heads[key] = load_head(folder, target_layers=self.target_depth, dtype=weight.dtype,
                                        device=weight.device)
        return self.heads[key]

    def plan(self, method=DEFAULT_METHOD, window=DEFAULT_WINDOW) -> Plan:
        """A call's Plan (mmspec.plan), made once before any of its work (an eagle spec on a model without a head
        fails here): the spec resolved with this pipeline's resources, and "auto" an AutoWindow up to this pipeline's
        widest that starts from what earlier calls with the same method name learned. A Plan is returned as it is."""
        if isinstance(method, Plan):
            return method
        return plan(method, window, widest=self.default_window, memories=self.window_memory, resolve=self.resolve)

    def check_rows(self, prompts: list, rows: int, **call) -> None:
        """Refuses in one line (mmspec.memory.DoesNotFit), before any work, a call on `prompts` (with the call's other
        options `call`) run `rows` rows at a time when they do not fit in the memory free now: what a render job
        checks of its batches before it starts."""
        self.check_call(prompts, rows, rows, **call)

    def check_call(self, prompts: list, rows: int, batch_size: "int | None", *, method=DEFAULT_METHOD,
                   window=DEFAULT_WINDOW, sampling: "dict | None" = None, **call) -> None:
        """Refuses in one line (mmspec.memory.DoesNotFit) a call on `prompts` (with the call's other options `call`)
        that makes `rows` rows, `batch_size` at a time (None: as many as fit), as mmspec.generate refuses it: a call
        checks this before any of its work, a progress bar or a first frame. Each generate call the call makes is
        estimated (`_requests`). method: a spec, or the call's Plan (then window is not read)."""
        self._check_requests(self._requests(prompts, **call), rows, batch_size, self.plan(method, window), sampling)

    def _check_requests(self, requests: list[tuple], rows: int, batch_size: "int | None", planned: Plan,
                        sampling: "dict | None") -> None:
        """mmspec.generate's memory check of each (target, condition, layout, given) request, for `rows` rows in all
        run `batch_size` at a time."""
        sampling = merged(self.default_sampling, sampling)
        for target, condition, layout, given in requests:
            per_row = row_need(target, condition, layout, planned=planned, sampling=sampling, given=given)
            rows_at_once(per_row, rows, module_device(target), batch_size)

    def _generate(self, run, *, total: int, planned: Plan, sampling, progress_bar: bool, on_commit,
                  started: float, compile: "bool | dict | None" = None):
        """run(planned=, sampling=, on_commit=, compile=) -> an object with .stats (mmspec.generate's Generation or
        generate_text's), with the call's Plan, the call's sampling merged over the model's defaults
        (mmspec.sampling.merged), compile defaulting to the pipeline's and a progress bar over `total` tokens. ->
        (what run returned, its summary, timed from `started`)."""
        sampling = merged(self.default_sampling, sampling)
        with progress(total, type(self).__name__, progress_bar) as hook:
            out = run(planned=planned, sampling=sampling, on_commit=chain(hook, on_commit),
                      compile=self.compile if compile is None else compile, engines=self.engines)
        policy = planned.policy
        if isinstance(policy, AutoWindow) and policy.memory is not None:
            policy.memory.save()  # what it learned, for the next process
        return out, out.stats.summary(planned.label, seconds=time.perf_counter() - started)

"""Job files: YAML (and an optional JSONL of items) -> a validated Job with every output named.

Everything is checked here, before a model loads or a file is written, so that a malformed job
costs nothing and is reported with the line and key at fault (mmspec render exits with status 2).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from mmspec.families import check
from mmspec.methods import DEFAULT_METHOD, DEFAULT_WINDOW, OPTIONS, Spec, check_method
from mmspec.options import deprecated
from mmspec.plan import plan
from mmspec.render.inputs import INPUT_KEYS, InputFiles
from mmspec.render.naming import file_name, output_id
from mmspec.rng import MAX_SEED
from mmspec.sampling import Sampling

PIPELINES = {"image": "ImagePipeline", "video": "VideoPipeline", "text": "TextPipeline"}
JOB_KEYS = ("kind", "model", "draft", "img_size", "batch_size", "compile", "defaults", "items", "items_file")
CALL_KEYS = ("method", "window", "sampling")
TEXT_KEYS = ("max_new_tokens", "stop_strings")
SEED_KEYS = ("seeds", "num_outputs", "num")  # (num: num_outputs's old name, until 0.2)


class JobError(ValueError):
    """A malformed job; the message names the file, line and key at fault."""


@dataclass(frozen=True)
class Output:
    id: str  # content hash of (kind, model, prompt, seed, settings, input files' bytes)
    file: str  # a plain file name inside the output folder
    prompt: str
    seed: int
    settings: dict  # the pipeline call's settings: method, window, sampling (+ text options)
    inputs: dict = field(default_factory=dict)  # image / mask: {"path": absolute, "sha256": of its bytes}

    @property
    def group(self) -> str:
        """Outputs with the same group can share a batch: rows differ only in prompt and seed (one engine call
        takes one image and mask for all its rows)."""
        return json.dumps([self.settings, self.inputs], sort_keys=True)


@dataclass(frozen=True)
class Job:
    kind: str
    model: str | None  # a folder, or None for the bundled model of the kind
    draft: str | None  # text: a draft model folder, for methods that need one
    batch_size: int
    outputs: list[Output]  # in job order, one per (item, seed), duplicates removed
    compile: bool = False  # torch.compile the decode step (the same files: not part of an output's id)
    img_size: int | None = None  # image, a Janus model: the images' side in pixels (deepseek's img_size)

    @property
    def has_draft_model(self) -> bool:
        """Whether the job's pipeline holds a draft model: text, with its bundled model (it comes with one) or a
        draft folder."""
        return self.kind == "text" and (self.model is None or self.draft is not None)

    @property
    def folder(self) -> Path:
        """The model folder: the job's, or the bundled model of the kind (its head/ serves method eagle)."""
        from mmspec.pipelines import model_folder

        return model_folder(self.kind, self.model)


def pipeline_class(kind: str):
    import mmspec.pipelines

    return getattr(mmspec.pipelines, PIPELINES[kind])


def load_job(path: "str | Path", batch_size: int | None = None) -> Job:
    """Parse and validate a job file; `batch_size` (the CLI's --batch-size) overrides the file's."""
    path = Path(path)
    data, lines = _read_yaml(path)
    where, top = _Where(path.name, lines), f"{path.name}: "  # top-level keys are unique: no line needed
    _no_unknown(data, JOB_KEYS, top)
    kind = data.get("kind")
    if kind not in PIPELINES:
        raise JobError(f"{top}kind: must be one of {list(PIPELINES)}, got {kind!r}")
    model = _folder(data, "model", path.parent, pipeline_class(kind).default_model, top)
    img_size = None if data.get("img_size") is None else _int(data["img_size"], 1, None, f"{top}img_size")
    try:  # what the model's family refuses of a render job (mmspec.families), before anything loads
        takes = check(model, kind, "render", img_size=img_size).inputs
    except ValueError as err:
        raise JobError(f"{top}model: {err}") from None
    draft = None
    if data.get("draft") is not None:
        if kind != "text":
            raise JobError(f"{top}draft: only text jobs take a draft model")
        draft = _folder(data, "draft", path.parent, "", top)
    size = _int(data.get("batch_size", 8), 1, None, f"{top}batch_size")
    if batch_size is not None:
        size = _int(batch_size, 1, None, "--batch-size")
    compile = data.get("compile", False)
    if not isinstance(compile, bool):
        raise JobError(f"{top}compile: must be true or false, got {compile!r}")
    header = Job(kind, model, draft, size, [], compile, img_size)  # what validating the items needs to know
    return replace(header, outputs=_outputs(header, data, path, where, takes))


def _outputs(job: Job, data: dict, path: Path, where: "_Where", takes: tuple[str, ...]) -> list[Output]:
    """One Output per (item, seed), in job order. An output asked for twice (the same prompt, seed, settings and
    files: the same output, mmspec's seed rule) is refused, naming both items: rendered once, the job would give fewer
    outputs than it lists without a word. `takes`: the pictures the model's family takes."""
    allowed = CALL_KEYS + SEED_KEYS + INPUT_KEYS + (TEXT_KEYS if job.kind == "text" else ())
    files = InputFiles(job.kind, job.model, path.parent, JobError, takes)
    defaults = {} if data.get("defaults") is None else data["defaults"]
    _mapping(defaults, f"{path.name}: defaults")
    defaults_label = f"{where.at(defaults)}defaults."
    _no_unknown(defaults, allowed, defaults_label)
    _settings(job, defaults, defaults_label, path.parent)  # its faults are named as its own, not as the first item's
    files.check(defaults, defaults_label, whole=False)  # an item may complete what the defaults give
    outputs: dict[str, Output] = {}
    asked_by: dict[str, str] = {}  # output id -> the item that asked for it first
    for label, item in _items(data, path, where):
        _mapping(item, label[:-1] if label.endswith(".") else f"{label}item")
        _no_unknown(item, ("prompt",) + allowed, label)
        prompt = item.get("prompt")
        if not isinstance(prompt, str):
            raise JobError(f"{label}prompt: must be a string, got {prompt!r}")
        if not prompt.strip():  # (as the pipelines, the CLI and the demo refuse it)
            raise JobError(f"{label}prompt: empty; say what to generate")
        merged = _merge(defaults, item)
        (settings, spec), inputs = _settings(job, merged, label, path.parent), files.check(merged, label, whole=True)
        identity = {"kind": job.kind, "model": data.get("model"), "prompt": prompt, "settings": settings}
        if spec.needs == "model":
            identity["draft"] = data.get("draft")
        if job.img_size is not None:  # (absent: ids as before the option existed)
            identity["img_size"] = job.img_size
        identity.update({key: file["sha256"] for key, file in inputs.items()})  # absent: ids as before inputs existed
        own_seeds = any(k in item for k in SEED_KEYS)
        for seed in _seeds(item, label) if own_seeds else _seeds(defaults, defaults_label):
            oid = output_id({**identity, "seed": seed})
            if oid in outputs:
                raise JobError(f"{label}seed {seed}: {asked_by[oid].rstrip('.')} asks for this output already (the "
                               f"same prompt {prompt!r}, seed and settings give the same output): give another seed, "
                               "or ask once with num_outputs or seeds")
            outputs[oid] = Output(oid, file_name(prompt, seed, oid, job.kind), prompt, seed, settings, inputs)
            asked_by[oid] = label
    return list(outputs.values())


class _Where:
    """Names a place in the job file: the file and the YAML line of a mapping."""

    def __init__(self, name: str, lines: dict):
        self.name, self.lines = name, lines

    def at(self, mapping) -> str:
        line = self.lines.get(id(mapping))
        return f"{self.name} line {line}: " if line else f"{self.name}: "


class _LineLoader(yaml.SafeLoader):
    """Safe YAML that records each mapping's line and refuses duplicate keys (YAML keeps the last)."""

    def construct_yaml_map(self, node):
        data = {}
        self.lines[id(data)] = node.start_mark.line + 1
        yield data
        keys = [self.construct_object(k, deep=True) for k, _ in node.value]
        for (k, _), key in zip(node.value, keys):
            if keys.count(key) > 1:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", k.start_mark)
        data.update(self.construct_mapping(node))


_LineLoader.add_constructor("tag:yaml.org,2002:map", _LineLoader.construct_yaml_map)


def _read_yaml(path: Path) -> tuple[dict, dict]:
    if not path.is_file():
        raise JobError(f"no job file at {path}")
    loader = _LineLoader(path.read_text(encoding="utf-8"))
    loader.lines = {}
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as err:
        raise JobError(f"{path.name}: not valid YAML: {err}") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise JobError(f"{path.name}: a job is a mapping with kind, model, batch_size, defaults and items")
    return data, loader.lines


def _items(data: dict, path: Path, where: _Where):
    """(label for errors, item) pairs from `items` or from the JSONL `items_file` beside the job."""
    top = f"{path.name}: "
    if ("items" in data) == ("items_file" in data):
        raise JobError(f"{top}give exactly one of items (a list) or items_file (a JSONL file)")
    if "items" in data:
        items = data["items"]
        if not isinstance(items, list) or not items:
            raise JobError(f"{top}items: must be a non-empty list of {{prompt: ...}} mappings")
        return [(f"{where.at(item)}items[{i}].", item) for i, item in enumerate(items)]
    name = data["items_file"]
    if not isinstance(name, str) or not (path.parent / name).is_file():
        raise JobError(f"{top}items_file: no file {name!r} next to the job file")
    pairs = []
    for n, line in enumerate((path.parent / name).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                pairs.append((f"{Path(name).name} line {n}: ", json.loads(line)))
            except json.JSONDecodeError as err:
                raise JobError(f"{Path(name).name} line {n}: not JSON: {err}") from None
    if not pairs:
        raise JobError(f"{top}items_file: {name} holds no items")
    return pairs


def _merge(defaults: dict, item: dict) -> dict:
    """Item keys override the defaults; a sampling mapping overrides the default sampling key by key."""
    merged = {**defaults, **item}
    if isinstance(defaults.get("sampling"), dict) and isinstance(item.get("sampling"), dict):
        merged["sampling"] = {**defaults["sampling"], **item["sampling"]}
    return merged


def _settings(job: Job, merged: dict, label: str, base: Path) -> "tuple[dict, Spec]":
    """-> (the pipeline call's settings, the method's spec)."""
    spec = _method(merged.get("method", DEFAULT_METHOD), job, label, base)
    try:  # the window that runs, as a call gives it (ar's 1 whatever is asked), so that both hash alike
        window = plan(spec, merged.get("window", DEFAULT_WINDOW),
                      resolve=lambda s: check_method(s, has_draft_model=True)).window.value
    except ValueError as err:
        raise JobError(f"{label}window: {str(err).removeprefix('window ')}") from None
    settings = {"method": spec.value, "window": window, "sampling": _sampling(merged.get("sampling"), job.kind, label)}
    if job.kind == "text":
        settings["max_new_tokens"] = _int(merged.get("max_new_tokens", 64), 1, None, f"{label}max_new_tokens")
        stops = merged.get("stop_strings", [])
        if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
            raise JobError(f"{label}stop_strings: must be a list of non-empty strings, got {stops!r}")
        settings["stop_strings"] = stops
    return settings, spec


def _method(method, job: Job, label: str, base: Path) -> Spec:
    """A method name or {name, options} -> its spec, checked, whose value is a name or a mapping when it has options,
    so that both hash alike. A folder an option names (a head) is relative to the job file, as the model folder
    is."""
    from mmspec.pipelines.base import head_folder

    if isinstance(method, dict):
        method = {k: str(base / v) if k in OPTIONS and OPTIONS[k].path and isinstance(v, str) else v
                  for k, v in method.items()}
    try:
        spec = Spec.parse(method)
        check_method(spec, has_draft_model=True)
    except (ValueError, TypeError, FileNotFoundError) as err:
        raise JobError(f"{label}method: {err}") from None
    if spec.needs == "model" and not job.has_draft_model:  # the pipeline gives its draft model
        raise JobError(f"{label}method: {spec.name} needs a text job with a draft model (job key draft)")
    if spec.needs == "head":  # the pipeline gives its model folder's head
        try:
            head_folder(job.folder)
        except FileNotFoundError as err:
            raise JobError(f"{label}method: {err}") from None
    return spec


def _sampling(sampling, kind: str, label: str) -> dict:
    """The given keys only: the pipeline fills the rest from the model's default sampling."""
    if sampling is None:
        return {}
    _mapping(sampling, f"{label}sampling")
    try:
        parsed = Sampling.coerce(sampling)
    except (ValueError, TypeError) as err:
        raise JobError(f"{label}sampling: {err}") from None
    if kind == "text" and parsed.cfg:
        raise JobError(f"{label}sampling.cfg_scale: text models have no null condition, so no CFG")
    return dict(sampling)


def _seeds(source: dict, label: str) -> list[int]:
    """`seeds: [..]`, or `num_outputs: n` for seeds 0..n-1 (the item's, else the defaults'); seed 0 if neither."""
    given = [k for k in SEED_KEYS if k in source]
    if len(given) > 1:
        raise JobError(f"{label}{', '.join(given)}: give one of them, not both")
    if "num" in source:
        deprecated("num", f"{label}num", stacklevel=2)
    for key in ("num_outputs", "num"):
        if key in source:
            return list(range(_int(source[key], 1, None, f"{label}{key}")))
    seeds = source.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds:
        raise JobError(f"{label}seeds: must be a non-empty list of ints, got {seeds!r}")
    seeds = [_int(s, 0, MAX_SEED, f"{label}seeds[{i}]") for i, s in enumerate(seeds)]
    if len(set(seeds)) != len(seeds):
        raise JobError(f"{label}seeds: a seed is repeated in {seeds}")
    return seeds


def _folder(data: dict, key: str, base: Path, default: str, top: str) -> str | None:
    """A model folder, relative to the job file; None keeps the pipeline's bundled model."""
    from mmspec.pipelines.base import model_path

    value = data.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise JobError(f"{top}{key}: must be a folder path or null, got {value!r}")
    try:
        folder = model_path(None if value is None else base / value, default)
    except FileNotFoundError as err:
        raise JobError(f"{top}{key}: {err}") from None
    return None if value is None else str(folder)


def _int(value, low: int, high: int | None, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"{low}..{high}" if high is not None else f">= {low}"
        raise JobError(f"{key}: must be an int {span}, got {value!r}")
    return value


def _mapping(value, key: str):
    if not isinstance(value, dict):
        raise JobError(f"{key}: must be a mapping, got {value!r}")


def _no_unknown(mapping: dict, known: tuple, prefix: str):
    unknown = [k for k in mapping if k not in known]
    if unknown:
        raise JobError(f"{prefix}{unknown[0]}: unknown key; known keys: {', '.join(known)}")

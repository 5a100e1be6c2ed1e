"""The family table: for every model family mmspec runs, how its folder is recognised, what it generates and through
which pipeline, its prompt and null-prompt rule, default sampling, tokens-to-pixels rule, converters, the pictures a
call may give, and the doors that refuse it with the reason why.

Pipelines (`*Pipeline.from_pretrained`), the CLI (`generate`, `bench`, `demo --model`), render jobs (`model:`) and
the demo read this table and nothing else to tell families apart. A new family is one module (its pipeline, with a
`from_pretrained(path, device=, dtype=, window_cache=, compile=)`) and one entry in FAMILIES.

Rules that live in code (null prompt, default sampling, pixels) are named "module:attribute", resolved by `rule`;
tests resolve every one. Nothing here imports torch or a pipeline until a folder is loaded.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

KINDS = ("image", "video", "text")
# the ways in: what a refusal names
DOORS = {"generate": "mmspec generate --model", "pipeline": "*Pipeline.from_pretrained",
         "render": "a render job's model:", "demo": "mmspec demo --model", "bench": "mmspec bench --model", "table": "mmspec bench --model --prompts",
         "serve": "mmspec serve --model"}


@dataclass(frozen=True)
class Family:
    name: str
    title: str  # how errors and docs name it
    model_types: tuple[str, ...]  # config.json's model_type of its folders
    pipelines: dict  # kind -> "module:Class", the pipeline of each kind it generates
    prompt: str  # what a prompt is, in one line
    null_prompt: str  # CFG's null condition: "module:attribute" of the rule (or what it is, when there is none)
    default_sampling: str  # "module:attribute", or "config.json" (the folder's default_sampling)
    pixels: str  # tokens -> pixels: "module:attribute"
    converters: tuple[str, ...] = ()  # `mmspec convert NAME` that make its folder from a release
    inputs: tuple[str, ...] = ()  # what a call may give besides a prompt: image, mask, video
    options: tuple[str, ...] = ()  # loading options it takes beside the common ones (OWN_OPTIONS)
    refuses: dict = field(default_factory=dict)  # door (DOORS) -> why it makes no sense for this family
    released_as: dict = field(default_factory=dict)  # model_type of a layout to convert first -> how
    cfg_check: "str | None" = None  # "module:function" refusing a call's cfg_scale, for a family without CFG
    matches: "Callable[[dict], bool] | None" = None  # tells apart families that share a model_type
    kind_of: "Callable[[dict], str] | None" = None  # its one kind, from the config, where it makes several

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.pipelines)

    def pipeline(self, kind: str):
        """The pipeline class of `kind`, imported now; a one-line refusal for a kind this family does not make."""
        if kind not in self.pipelines:
            raise ValueError(f"{_a(self.title)} model generates {' and '.join(self.kinds)}, not {kind}")
        module, name = self.pipelines[kind].split(":")
        return getattr(importlib.import_module(module), name)

    def check_door(self, door: str, path: "str | Path | None" = None) -> None:
        """A one-line refusal, before any work, where the door makes no sense for this family."""
        if door in self.refuses:
            where = f"{path} is" if path is not None else "this is"
            raise ValueError(f"{where} {_a(self.title)} model: {DOORS[door]} does not run it ({self.refuses[door]})")

    def check_inputs(self, given: "list[str] | tuple[str, ...]", path: "str | Path | None" = None) -> None:
        """A one-line refusal of pictures (image, mask, video) this family's calls do not take."""
        extra = [name for name in given if name not in self.inputs]
        if extra:
            takes = f"it takes {', '.join(self.inputs)}" if self.inputs else "it generates from the prompt alone"
            raise ValueError(f"{path or 'the model'} is {_a(self.title)} model: no {' or '.join(extra)} ({takes})")


def _a(title: str) -> str:
    return f"{'an' if title[0].lower() in 'aeiou' else 'a'} {title}"


def _reference_kind(config: dict) -> str:
    return "video" if (config.get("layout") or {}).get("type") == "Grid3D" else "image"


def _llamagen(config: dict) -> bool:
    """A reference GPT folder as `convert llamagen` writes it: the GPT alone, none of the entries a bundled-format
    folder has beside it (so that a bundled-format folder missing one is still read as one, and told what it lacks)."""
    return not {"layout", "tokenizer", "prompt_vocab"} & set(config)


def _causal_lm(config: dict) -> bool:
    return any(str(a).endswith("ForCausalLM") for a in config.get("architectures") or [])


NO_DEMO_VIDEO = "the demo's video tab draws a clip from a prompt and a first frame; this model continues a video"
NOT_AN_IMAGE_TABLE = "the field's table is of image models"

FAMILIES = (
    Family("reference", "reference GPT (mmspec's own: the bundled emoji models)", ("mmspec-gpt",),
           {"image": "mmspec.pipelines.grid:ImagePipeline", "video": "mmspec.pipelines.grid:VideoPipeline"},
           prompt="words of the folder's vocab.json, cond_len of them (models/README.md)",
           null_prompt="mmspec.reference.gpt:GPT.null_condition", default_sampling="config.json",
           pixels="mmspec.tokenizers.pixels:bundled_pixels", inputs=("image", "mask"),
           matches=lambda config: not _llamagen(config), kind_of=_reference_kind),
    Family("llamagen", "LlamaGen", ("mmspec-gpt",), {"image": "mmspec.pipelines.llamagen:LlamaGenPipeline"},
           prompt="a class label (c2i) or a .safetensors file of FLAN-T5 features (t2i), as its sampling scripts take",
           null_prompt="mmspec.reference.gpt:GPT.null_condition",
           default_sampling="mmspec.pipelines.llamagen:DEFAULT_SAMPLING",
           pixels="mmspec.tokenizers.pixels:llamagen_pixels", converters=("llamagen", "llamagen-vq"),
           matches=_llamagen),
    Family("chameleon", "Chameleon (Lumina-mGPT, Anole)", ("chameleon",),
           {"image": "mmspec.pipelines.chameleon:ChameleonPipeline"},
           prompt="text in Lumina-mGPT's instruction (mmspec.adapters.chameleon.instruction), then BOI and the size",
           null_prompt="mmspec.adapters.chameleon:ChameleonImage.image_start",
           default_sampling="mmspec.adapters.chameleon:DEFAULT_SAMPLING",
           pixels="mmspec.tokenizers.pixels:chameleon_pixels", converters=("chameleon-vq",)),
    Family("janus", "Janus / Janus-Pro", ("janus",), {"image": "mmspec.pipelines.janus:JanusPipeline"},
           prompt="text in deepseek's turn, then BOI (mmspec.adapters.janus_release.generation_prompt: the chat "
                  "template `convert janus` writes)",
           null_prompt="mmspec.adapters.janus:deepseek_null_prompt",
           default_sampling="mmspec.pipelines.janus:janus_sampling",
           pixels="mmspec.tokenizers.pixels:janus_pixels", converters=("janus",), options=("img_size",),
           released_as={"multi_modality": "Janus in deepseek's layout: convert it once with "
                                          "`mmspec convert janus {path} OUT`, then load OUT"}),
    Family("emu3", "Emu3", ("emu3",), {"image": "mmspec.pipelines.emu3:Emu3Pipeline"},
           prompt="BOS + text + <|image start|>H*W<|image token|> (transformers' Emu3Processor)",
           null_prompt="mmspec.pipelines.emu3:NEGATIVE_PROMPT",
           default_sampling="mmspec.pipelines.emu3:DEFAULT_SAMPLING",
           pixels="mmspec.tokenizers.pixels:emu3_pixels"),
    Family("cosmos", "Cosmos-1 autoregressive", ("mmspec-cosmos",), {"video": "mmspec.pipelines.cosmos:CosmosPipeline"},
           prompt="none (base: continues --video) or T5 features / text with a local T5 (Video2World)",
           null_prompt="none: CFG is refused (Cosmos's AR sampling has none)",
           default_sampling="mmspec.reference.cosmos_checkpoint:COSMOS_SAMPLING",
           pixels="mmspec.tokenizers.pixels:cosmos_pixels", converters=("cosmos",),
           inputs=("video",), options=("allow_torchscript",), cfg_check="mmspec.adapters.cosmos:refuse_cfg",
           refuses={"demo": NO_DEMO_VIDEO,
                    "serve": "the service takes a prompt and a first frame; this model continues a video: "
                             "mmspec generate video --model FOLDER --video",
                    "render": "a render job gives prompts and pictures, and this model "
                              "continues a video: mmspec generate video --model FOLDER --video",
                    "table": f"{NOT_AN_IMAGE_TABLE}; a Cosmos folder is benchmarked over clips: "
                             "mmspec bench video --model FOLDER --videos DIR"}),
    Family("text", "transformers causal LM", (), {"text": "mmspec.pipelines.text:TextPipeline"},
           prompt="text, through the folder's tokenizer", null_prompt="none: text models have no CFG",
           default_sampling="mmspec.adapters.text:HFCausalLM.default_sampling", pixels="none: text",
           options=("draft",), refuses={"table": f"{NOT_AN_IMAGE_TABLE}; text: mmspec bench text --model FOLDER"},
           matches=_causal_lm),
)
BY_NAME = {f.name: f for f in FAMILIES}


def rule(path: str):
    """A "module:attribute" of the table (attribute may be dotted) -> the object."""
    module, _, name = path.partition(":")
    value = importlib.import_module(module)
    for part in name.split("."):
        value = getattr(value, part)
    return value


def read_folder_config(path: "str | Path") -> "dict | None":
    """A folder's config.json, None when there is none (the pipeline's loader then says what is missing)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    try:
        raw = json.loads(config.read_text())
    except ValueError as err:
        raise ValueError(f"{config} is not valid JSON ({err}); restore it from the model's source") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{config} is not a JSON object; restore it from the model's source")
    return raw


def family_of(path: "str | Path | None", kind: "str | None" = None) -> Family:
    """The family of a model folder (None: the bundled model of `kind`), from its config.json, before anything loads;
    a one-line error for a folder of no family, or one to convert first."""
    if path is None:
        return BY_NAME["text" if kind == "text" else "reference"]
    config = read_folder_config(path)
    if config is None:  # (no config: the kind's own loader says what is missing)
        return BY_NAME["text" if kind == "text" else "reference"]
    model_type = config.get("model_type")
    for family in FAMILIES:
        if model_type in family.released_as:
            raise ValueError(f"{path} is {family.released_as[model_type].format(path=path)}")
    found = [f for f in FAMILIES if (model_type in f.model_types or not f.model_types)
             and (f.matches is None or f.matches(config))]
    if not found and kind == "text":  # (any causal LM transformers loads: its loader says when it is none)
        return BY_NAME["text"]
    if not found:
        runs = ", ".join(f"{f.title} ({', '.join(f.model_types) or 'architectures *ForCausalLM'})" for f in FAMILIES)
        raise ValueError(f"{path}: model_type {model_type!r} is not a family mmspec runs ({runs})")
    return found[0]


def kind_of(path: "str | Path", family: "Family | None" = None) -> str:
    """What a folder generates: its family's one kind (a reference GPT's from its layout; the first of its kinds when
    the folder has no config.json, which its loader then asks for)."""
    family = family or family_of(path)
    config = read_folder_config(path)
    return family.kind_of(config) if family.kind_of is not None and config is not None else family.kinds[0]


# loading options some families take (Family.options), and what they are
OWN_OPTIONS = {"draft": "a text model's draft model",
               "allow_torchscript": "loads a Cosmos folder's TorchScript tokenizer",
               "img_size": "a Janus image's side in pixels, deepseek's img_size"}


def check(path: "str | Path | None", kind: str, door: str = "pipeline", expect: "type | None" = None,
          inputs: "tuple[str, ...] | list[str]" = (), **options) -> Family:
    """The family of a model folder (None: the kind's bundled model) when `door` runs it as `kind` with `options`
    and the pictures `inputs` (image, mask, video); else a one-line refusal, before anything loads: a door that makes
    no sense for the family, a folder of another kind, options or pictures the family does not take. `expect`: the
    pipeline class asked for, which must be the family's or a door to every family (`opens_families`)."""
    family = family_of(path, kind)
    family.check_door(door, path)
    pipeline = family.pipeline(kind)
    config = read_folder_config(path) if path is not None else None
    if config is not None and family.kind_of is not None and family.kind_of(config) != kind:
        raise ValueError(f"{path} is {_a(family.title)} model that generates {family.kind_of(config)}, not {kind}")
    if expect is not None and not (expect.opens_families or issubclass(pipeline, expect)):
        raise ValueError(f"{path} is {_a(family.title)} model: load it with {pipeline.__name__}.from_pretrained or "
                         f"the {kind} door, not {expect.__name__}")
    extra = sorted(k for k, v in options.items()
                   if k in OWN_OPTIONS and v is not None and v is not False and k not in family.options)
    if extra:
        raise ValueError(f"{path or 'the bundled model'} is {_a(family.title)} model: it takes no "
                         f"{', '.join(f'{k} ({OWN_OPTIONS[k]})' for k in extra)}")
    family.check_inputs(inputs, path)
    return family


def load(path: "str | Path | None", kind: str, door: str = "pipeline", expect: "type | None" = None, **options):
    """The pipeline of `kind` on a model folder (None: the kind's bundled model), by its family: `check`ed, then the
    family pipeline's `load_folder(path, **options)`."""
    family = check(path, kind, door, expect, **options)
    options = {k: v for k, v in options.items() if k not in OWN_OPTIONS or k in family.options}
    pipe = family.pipeline(kind).load_folder(path, **options)
    pipe.family = family
    return pipe

"""Which family a model folder holds, from its config.json, before anything loads: the pipelines' and the CLI's one
check that a folder is one mmspec runs, with a line that says what to do when it is not."""
from __future__ import annotations

import json
from pathlib import Path

REFERENCE = "mmspec-gpt"  # the reference GPT folders (the bundled models, converted LlamaGen checkpoints)
CHAMELEON = "chameleon"  # Lumina-mGPT, Anole (mmspec.pipelines.chameleon)
PIPELINE_FAMILIES = (REFERENCE, CHAMELEON)
# families mmspec runs through their Python adapters (docs/usage.md), not through the pipelines
ADAPTERS = {"janus": "mmspec.adapters.janus.JanusImage", "emu3": "mmspec.adapters.emu3.Emu3Image"}


def family(path: "str | Path") -> str:
    """The model_type of a folder's config.json, if the pipelines run it; else a one-line error saying what to do."""
    from mmspec.adapters.janus_release import DEEPSEEK_TYPE
    from mmspec.reference.cosmos_checkpoint import MODEL_TYPE as COSMOS

    config = Path(path) / "config.json"
    try:
        model_type = json.loads(config.read_text()).get("model_type") if config.is_file() else None
    except ValueError as err:
        raise ValueError(f"{config} is not valid JSON ({err}); restore it from the model's source") from None
    if model_type in PIPELINE_FAMILIES or model_type is None:  # (no config: the pipeline's loader says what is missing)
        return model_type or REFERENCE
    if model_type == DEEPSEEK_TYPE:
        raise ValueError(f"{path} is Janus in deepseek's layout (model_type {DEEPSEEK_TYPE!r}); convert it once with "
                         f"`mmspec convert janus {path} OUT`, then run OUT through {ADAPTERS['janus']}")
    if model_type == COSMOS:
        raise ValueError(f"{path} is a Cosmos video model: run it as video (mmspec generate video --model {path}; "
                         "docs/cosmos.md)")
    if model_type in ADAPTERS:
        raise ValueError(f"{path} is a {model_type} model: run it through {ADAPTERS[model_type]} (docs/usage.md); the "
                         f"pipelines and the CLI run {', '.join(PIPELINE_FAMILIES)} folders")
    raise ValueError(f"{path}: model_type {model_type!r} is not a family mmspec runs (pipelines and CLI: "
                     f"{', '.join(PIPELINE_FAMILIES)}; Python adapters: {', '.join(ADAPTERS)})")

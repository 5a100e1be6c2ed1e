"""The options every entry point shares (command line, pipelines, mmspec.generate, render jobs, demo): one name each,
with its help text and default from here, and the old names, kept as deprecated aliases until 0.2."""
from __future__ import annotations

import warnings

NUM_OUTPUTS = 1  # outputs per prompt (per condition in mmspec.generate)
NUM_OUTPUTS_HELP = f"outputs per prompt (default {NUM_OUTPUTS})"
BATCH_SIZE_HELP = "outputs generated at a time (default: as many as fit in half the memory free, estimated first)"
SEED_HELP = "seed of the first output; output i gets seed + i (default 0; at most 2**63-1): a prompt and seed give " \
    "the same output through every door (API, command line, render jobs, demo)"
OVERWRITE_HELP = "number the files from 000, replacing those there (default: after the folder's, replacing nothing)"
CONCURRENCY, SLOTS = 8, 16  # a demo's generations at a time per model, and the rows of them decoded at once
CONCURRENCY_HELP = f"visitors' generations at a time per model (default {CONCURRENCY})"
SLOTS_HELP = f"rows decoded at once per model: the running generations' rows share one decode (default {SLOTS}, " \
    "or as many as fit in memory)"
RENAMED = {"num_samples": "num_outputs", "num": "num_outputs", "--num": "--num-outputs"}  # old -> the one name


def deprecated(old: str, where: str, stacklevel: int = 3) -> None:
    """Warn that `old` is the old name of an option (RENAMED) and goes in 0.2."""
    warnings.warn(f"{where}: {old} is the old name of {RENAMED[old]}, which replaces it in 0.2", DeprecationWarning,
                  stacklevel=stacklevel)


def one_of(new_value, old_value, old: str, where: str, default):
    """An option given by its name (`new_value`) or by its old name (`old_value`, with a deprecation warning), not
    both; `default` when neither."""
    if old_value is None:
        return default if new_value is None else new_value
    if new_value is not None:
        raise ValueError(f"{where}: give {RENAMED[old]} or its old name {old}, not both")
    deprecated(old, where, stacklevel=4)
    return old_value


def refuse_unknown(options, takes, what: str) -> None:
    """One line naming the options a registry entry (a method's, a window policy's) does not take."""
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise ValueError(f"bad options {unknown} for {what}: it takes {', '.join(takes) or 'none'}")

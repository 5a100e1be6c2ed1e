"""How a step runs: eager, or compiled by torch.compile (one graph per L and kind of draft, CUDA graphs on
a GPU), and on a CPU whichever of the two is faster for each kind of step. What a step does is mmspec.verify_step's
`VerifyStep`; this module only runs it."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import torch

from mmspec.steps import Draft, Window

if TYPE_CHECKING:
    from mmspec.adapters.rows import Rows
    from mmspec.verify_step import VerifyStep
    from mmspec.state import DecodeState

# one graph per L and kind of draft (with or without q, a tree), for every method and generation of the
# process: dynamo's default of 8 graphs per function would end a run mid-generation
RECOMPILE_LIMIT = 256


class Executor:
    """Runs a VerifyStep over the drafts of a window (`Window`): eager, or compiled.

    The step reads nothing from the device, so `compile` can trace it whole: torch.compile with `fullgraph=True` (a
    graph break is an error, not a silent slowdown) and one graph per L (`dynamic=False`: the window's L
    is a Python int, every tensor shape follows from it); on CUDA in mode "reduce-overhead" (CUDA graphs). A dict is
    passed to torch.compile as keyword arguments (e.g. {"backend": "eager"} to check the trace only). The target
    session's cache attends over all its slots inside a compiled step (see mmspec.cache: a static view), which is
    what an accelerator does anyway.

    Compiled, a chain shorter than the window asked for (a lookup's match, a head's chain that stopped where it was
    unsure) is padded to the next power of two within it (`_padded`), and the step commits no further than the
    drafts it was given: drafters whose chains vary in length then meet a few L, not every one, each compiled
    once. Once rows have left the forwards (on a CPU) the steps run eager.
    """

    def __init__(self, step: "VerifyStep", state: "DecodeState", compile: "bool | dict" = False,
                 rows: "Rows | None" = None):
        """rows: the rows the step's session is narrowed to (None: it runs every row to the end)."""
        self.step, self.session, self.rows = step, step.session, rows
        self.run, self.compiled = step, bool(compile)
        self.unpadded: dict[int, torch.Tensor] = {}  # L -> L as a tensor (a compiled step's given drafts end there)
        if compile:
            options = dict(compile) if isinstance(compile, dict) else {}
            if self.session.device.type == "cuda":
                options.setdefault("mode", "reduce-overhead")
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
            torch._dynamo.config.accumulated_recompile_limit = max(
                torch._dynamo.config.accumulated_recompile_limit, RECOMPILE_LIMIT)
            self.run = torch.compile(step.__call__, fullgraph=True, dynamic=False, **options)
            # what the step writes in place, kept at one address all generation long: CUDA graphs run a step only
            # when every input it writes is static ("skipping cudagraphs due to mutated inputs" otherwise: an eager
            # launch of every kernel). Unguarded: the next generation's tensors re-record the graphs, no recompile.
            for t in (*step.buffers(), *state.buffers()):
                torch._dynamo.mark_static_address(t, guard=False)
        # on a CPU a compiled step is not always the faster (it attends over every slot, and a wide step's cost is the
        # host's): each kind of step is timed both ways, and the faster runs. On an accelerator the compiled step
        # (CUDA graphs) always does.
        self.faster = Faster() if compile and self.session.device.type == "cpu" else None

    def __call__(self, state: "DecodeState", draft, window: Window):
        """The step over the drafts for `window` -> (verdict, logp [B, W, V], k [B]). It verifies L = the drafts' slots
        + 1 positions (a drafter may draft fewer than the window asked for); a token tree never stays in step."""
        L, in_step = draft.slots + 1, window.in_step and draft.tree is None
        if not self.compiled or self.rows is not None and not self.rows.all:  # rows have left (on a CPU): eager
            return self.step(state, draft, L, in_step)
        unpadded = self.unpadded.get(L)
        if unpadded is None:
            unpadded = self.unpadded[L] = torch.tensor(L, device=state.seq.device)
        bucket = min(1 << (L - 1).bit_length(), window.L) if draft.tree is None else L  # (a chain is padded)
        key = (bucket, type(draft))
        compiled = self.faster is None or self.faster.compiled(key)
        t = time.perf_counter()
        if compiled:
            out = self.run(state, draft if bucket == L else _padded(draft, bucket - 1), bucket, in_step, unpadded)
        else:
            out = self.step(state, draft, L, in_step)
        if self.faster is not None:
            self.faster.record(key, compiled, time.perf_counter() - t)
        return out


def rows_may_leave(compile: "bool | dict", device: torch.device) -> bool:
    """Whether the target's rows that are done may leave its forwards: a compiled step keeps its shapes (every row),
    but on a CPU the steps after a row has left run eager: its rows that are done cost more than the compiled step
    saves."""
    return not compile or device.type == "cpu"


class Faster:
    """Which of the compiled and the eager step runs faster, per kind of step, timed on the running generation (on a
    CPU, where each step's time is the host's): `trial` timed steps of each, the compiled first (its first call, which
    compiles or re-records, is not counted), then the faster for the rest of the generation."""

    def __init__(self, trial: int = 3):
        self.trial = trial
        self.seconds: dict = {}  # kind -> ([compiled steps' seconds], [eager steps' seconds])

    def compiled(self, key) -> bool:
        compiled, eager = self.seconds.setdefault(key, ([], []))
        if len(compiled) <= self.trial or len(eager) < self.trial:
            return len(compiled) <= self.trial
        return min(compiled[1:]) <= min(eager)

    def record(self, key, compiled: bool, seconds: float) -> None:
        times = self.seconds.setdefault(key, ([], []))[0 if compiled else 1]
        if len(times) < self.trial + compiled:  # (the compiled list holds the untimed first call too)
            times.append(seconds)


def _padded(draft: Draft, D: int) -> Draft:
    """A chain of drafts -> D >= its slots: its last token repeated, copied (one-hot q), for the step to verify and
    commit no further than the drafts it was given (the step's `unpadded`). Lossless whatever the filler: the commit
    then ends at or before the given drafts' last slot, a point fixed before anything is drawn, and that slot's output
    is p's whether its filler draft passed or not."""
    pad = D - draft.slots
    tokens = torch.cat([draft.tokens, draft.tokens[:, -1:].expand(-1, pad)], 1)
    onehot = torch.cat([draft.onehot, draft.onehot.new_ones(draft.onehot.shape[0], pad)], 1)
    q = None if draft.q is None else torch.nn.functional.pad(draft.q, (0, 0, 0, pad))  # (unread: one-hot slots)
    return Draft(tokens, q, onehot)

"""A call planned once: its method and window policy, made where the call enters (mmspec.generate, a pipeline, the
CLI, a render job, the demo) and passed down as one `Plan`. The one place a method's fixed window (ar's 1) beats the
window asked for."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from mmspec.methods import DEFAULT_METHOD, DEFAULT_WINDOW, Method, Spec, resolve_method
from mmspec.state import forced_runs
from mmspec.window import AUTO_WIDEST, WINDOWS, FixedWindow, WindowMemories, WindowPolicy, WindowSpec


@dataclass(frozen=True)
class Plan:
    """One call's method and the window policy its steps ask for L (a fresh one per call: policies learn as they
    run); `window`: the window that runs, as a caller gives it (the method's fixed one, else as asked)."""
    method: Method
    policy: WindowPolicy
    window: WindowSpec
    key: tuple = ()  # what the plan asks for (method spec, window spec): calls with equal keys run alike (an engine
    # running one call's rows runs another's, mmspec.engine.Engines)

    @property
    def speculates(self) -> bool:
        """Whether any step drafts (not plain AR at every step)."""
        return self.policy.max_window > 1

    @property
    def label(self) -> "str | None":
        """The policy's name in a call's summary: None for a fixed window (its L is the summary's), else its
        registered name (a policy object's: its class's)."""
        if isinstance(self.policy, FixedWindow):
            return None
        return next((name for name, entry in WINDOWS.items() if type(self.policy) is entry.kind),
                    type(self.policy).__name__)

    def room(self, forced: torch.Tensor) -> int:
        """The widest window a generation makes room for (caches, buffers): the policy's widest, or one over the
        longest run of `forced` [R, N] tokens and the one after it, committed in one forward."""
        return max(self.policy.max_window, int(forced_runs(forced).max()) + 1)


def plan(method: "str | dict | Spec | Method" = DEFAULT_METHOD, window: Any = DEFAULT_WINDOW, *,
         widest: int = AUTO_WIDEST, memories: "WindowMemories | None" = None,
         resolve: Callable[[Any], Method] = resolve_method) -> Plan:
    """A method spec (or Method) and a window (an int, a policy's name, {'name': ..., options}, a policy object) ->
    the call's Plan, checked before any work. widest: "auto"'s widest window (a pipeline's `default_window`);
    memories: what earlier calls learned, by method name (a pipeline's; only a method named without options has
    its own); resolve: a spec -> its Method, its resources bound (a pipeline's draft model and head)."""
    window = WindowSpec.parse(window)
    spec = method if isinstance(method, Method) else Spec.parse(method)
    method = resolve(spec)
    asked = repr(spec.value) if isinstance(spec, Spec) else id(method)  # (a Method object: itself)
    if method.window is not None:  # ar verifies one position, whatever window is asked
        fixed = WindowSpec.parse(method.window)
        return Plan(method, FixedWindow(method.window), fixed, (asked, _key(fixed)))
    name = spec.value if isinstance(spec, Spec) else None
    memory = memories[name] if memories is not None and isinstance(name, str) and window.learns else None
    return Plan(method, window.build(widest, memory), window, (asked, _key(window), widest))


def _key(window: WindowSpec) -> tuple:
    return window.name, repr(sorted(window.options.items())), id(window.policy) if window.policy is not None else None

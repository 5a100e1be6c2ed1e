"""Window policies by name, as methods are (mmspec.methods.REGISTRY): `WINDOWS` holds each policy's factory, the
options it takes and its help, and a window argument (an int, a name, {'name': ..., options} or a policy object) is
parsed once where it enters (`WindowSpec.parse`) and built into a fresh policy for each call (`WindowSpec.build`).
The CLI's --window help, a job's window key and the demo's choices are read from here, so a new policy is its class
and one entry."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from mmspec.options import refuse_unknown
from mmspec.window.auto import AUTO_WIDEST, AutoWindow
from mmspec.window.base import MAX_WINDOW, AcceptanceWindow, FixedWindow, WindowPolicy
from mmspec.window.memory import WindowMemory

POLICY_PARTS = ("max_window", "in_step", "start", "__call__", "observe")


def _positions(name: str) -> Callable[[Any], int]:
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WINDOW:
            raise ValueError(f"{name} must be in [1, {MAX_WINDOW}], got {value!r}")
        return value
    return check


@dataclass(frozen=True)
class WindowEntry:
    """A registered window policy: `build(widest, memory, **options)` -> a fresh policy (`widest`: the widest window
    the caller knows to pay, a pipeline's `default_window`; `memory`: what earlier calls measured, given where the
    policy `learns`), `kind` its class, `help` one line, and `options` each option's check."""
    build: Callable[..., WindowPolicy]
    kind: type
    help: str
    options: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    learns: bool = False  # it starts from what earlier calls measured (a WindowMemory) and adds to it


WINDOWS: dict[str, WindowEntry] = {
    "fixed": WindowEntry(lambda widest, memory, window: FixedWindow(window), FixedWindow,
                         "the same L at every step (an int names it: window=16)", {"window": _positions("window")}),
    "auto": WindowEntry(lambda widest, memory: AutoWindow(max_window=widest, memory=memory), AutoWindow,
                        "L picked at every step from measured step costs and acceptance, up to the model's widest "
                        "(16 image, 64 video, 8 text; 32 for a target of your own)", learns=True),
    "acceptance": WindowEntry(lambda widest, memory, **options: AcceptanceWindow(**options), AcceptanceWindow,
                              "L grows while drafts are accepted in long runs and shrinks when short, timing nothing "
                              "(a run repeats exactly; for a GPU, where a wide step costs about a narrow one)",
                              {"max_window": _positions("max_window"), "min_window": _positions("min_window")}),
}


def window_help() -> str:
    """What --window, a job's window key and the demo take, from the registry."""
    named = "; ".join(f"{name}: {entry.help}" for name, entry in WINDOWS.items() if name != "fixed")
    return f"positions verified per forward, an int in [1, {MAX_WINDOW}], or a policy by name ({named})"


@dataclass(frozen=True)
class WindowSpec:
    """A window argument, checked: a registered policy's name and options, or a policy object given as it is."""
    name: str
    options: dict
    policy: "WindowPolicy | None" = None  # a policy object the caller made (its name: its class's)

    @classmethod
    def parse(cls, window: "int | str | dict | WindowPolicy | WindowSpec | None") -> "WindowSpec":
        """16, 'auto' (or None), 'acceptance', {'name': 'acceptance', 'min_window': 8} or a policy object -> a
        WindowSpec; a window out of range, an unknown name or option, or an object that is not a policy raises
        ValueError."""
        if isinstance(window, WindowSpec):
            return window
        if window is None:
            window = "auto"
        if isinstance(window, int) and not isinstance(window, bool):
            window = {"name": "fixed", "window": window}
        if isinstance(window, str):
            window = {"name": window}
        if isinstance(window, dict):
            options = dict(window)
            name = options.pop("name", None)
            if name not in WINDOWS:
                named = sorted(set(WINDOWS) - {"fixed"})
                raise ValueError(f"window must be an int in [1, {MAX_WINDOW}] or one of {named}, got {name!r}")
            entry = WINDOWS[name]
            refuse_unknown(options, entry.options, f"window {name!r}")
            return cls(name, {k: entry.options[k](v) for k, v in options.items()})
        return cls(type(window).__name__, {}, _checked(window))

    @property
    def value(self) -> "int | str | dict | WindowPolicy":
        """The window as a caller gives it: an int for a fixed one, a name alone when it has no options."""
        if self.policy is not None:
            return self.policy
        if self.name == "fixed":
            return self.options["window"]
        return {"name": self.name, **self.options} if self.options else self.name

    @property
    def learns(self) -> bool:
        """Whether the policy starts from what earlier calls measured (`build`'s memory)."""
        return self.policy is None and WINDOWS[self.name].learns

    def build(self, widest: int = AUTO_WIDEST, memory: "WindowMemory | None" = None) -> WindowPolicy:
        """The policy for one call (a policy object given: itself)."""
        if self.policy is not None:
            return self.policy
        return WINDOWS[self.name].build(widest, memory, **self.options)


def _checked(policy) -> WindowPolicy:
    if isinstance(policy, bool) or not callable(policy):
        raise ValueError(f"window must be an int in [1, {MAX_WINDOW}], a policy's name ({', '.join(WINDOWS)}) or a "
                         f"window policy, got {policy!r}")
    top = getattr(policy, "max_window", None)
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_WINDOW:
        raise ValueError(f"window must be in [1, {MAX_WINDOW}], got {top!r}")
    if not all(hasattr(policy, part) for part in POLICY_PARTS) or not callable(policy.start) \
            or not callable(policy.observe):
        raise ValueError("a window policy needs max_window, in_step, start(session, state), __call__(state) and "
                         "observe(state, k, seconds)")
    return policy

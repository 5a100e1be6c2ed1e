"""Methods: a drafter and a verifier, named. The loop never looks at the name. The table of methods (what each drafts
and how it is verified) is `method_table()`, from the registry; README.md and docs/methods.md hold it as it writes it
(tests/test_readme.py fails when they differ).

Every Jacobi method, draft-model and eagle take `proactive=(width, depth)`: slot 0 gets width - 1 siblings, each
heading a branch of depth tokens, verified in the same forward (mmspec.drafters.proactive, mmspec.tree).

`REGISTRY` holds every method: its factory, the options it takes (`OPTIONS`: how each is checked and given on the
command line) and the resource a caller may supply (a draft model, a head). A spec is parsed once where it enters
(`Spec.parse`) and its resources are bound in one place (`Spec.bind`); the CLI's flags, a job's method keys and the
demo's choices are read from the registry, so a new method is its drafter and verifier and one entry here.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from os import PathLike
from typing import Any, Callable

from mmspec.drafters import (CoupledRedraw, DraftModelDrafter, Drafter, GumbelRedraw, IndependentRedraw,
                             JacobiDrafter, LookupDrafter, NoDraft, make_fill)
from mmspec.drafters.proactive import (Branches, FreshBranches, ModelBranches, NoiseBranches, NoiseModelBranches,
                                      ProactiveDrafter)
from mmspec.drafters.unigram import UnigramDrafter
from mmspec.layouts import Layout
from mmspec.loading import check_folder
from mmspec.options import refuse_unknown
from mmspec.verify import (BranchVerifier, ChainVerifier, GumbelMatchVerifier, RejectionVerifier, TreeVerifier,
                           Verifier)


@dataclass(frozen=True)
class Method:
    name: str
    make_drafter: Callable[[Layout], Drafter]  # a fresh drafter for each generation
    verifier: Verifier
    window: int | None = None  # fixed window (ar: 1), else the caller's
    tree_nodes: int = 0  # window nodes a forward may add beside the chain (proactive branches)

    @property
    def same_tokens(self) -> bool:
        """Whether a row's tokens are the ones `ar` draws with its seed whatever the windows it runs (plain AR, or a
        verifier on AR's noise), so that they do not depend on its batch mates (mmspec.engine)."""
        return self.window == 1 or self.verifier.same_tokens

    def drafter(self, layout: Layout) -> Drafter:
        """A fresh drafter for a generation, checked against the verifier before any work: every kind of draft record
        it makes (a chain, branches, a token tree) must be one the verifier reads (each declares its own: `makes` of
        the Drafter protocol, `reads` of the Verifier protocol)."""
        drafter = self.make_drafter(layout)
        makes, reads = drafter.makes, self.verifier.reads
        if not makes <= reads:
            raise ValueError(f"method {self.name!r}: its drafter makes {sorted(makes - reads)} drafts, which its "
                             f"verifier {type(self.verifier).__name__} does not read (it reads {sorted(reads)})")
        return drafter


def ar() -> Method:
    return Method("ar", lambda layout: NoDraft(), RejectionVerifier(), window=1)


def _branches(proactive, kind: type[Branches]) -> "Branches | None":
    if proactive is None:
        return None
    return kind(*_int_pair(proactive, "proactive"))


def _with_branches(name: str, make_chain: Callable[[Layout], Drafter], verifier: ChainVerifier,
                   branches: "Branches | None") -> Method:
    """A chain method, or with branches the same around a tree: branches beside the chain's drafts and the branch
    verifier around its verifier."""
    if branches is None:
        return Method(name, make_chain, verifier)
    return Method(name, lambda layout: ProactiveDrafter(make_chain(layout), branches), BranchVerifier(verifier),
                  tree_nodes=branches.nodes)


def _jacobi(name: str, redraw, verifier, init: "str | None", proactive=None,
            kind: type[Branches] = FreshBranches) -> Method:
    """init None: the layout's default_init (random, or the previous frame on video)."""
    branches = _branches(proactive, kind)  # (branches draw siblings from slot 0's law: the drafter keeps it)
    laws = verifier.reads_q or branches is not None
    return _with_branches(name, lambda layout: JacobiDrafter(redraw, make_fill(init or layout.default_init), laws),
                          verifier, branches)


def jacobi(init: "str | None" = None, proactive=None) -> Method:
    return _jacobi("jacobi", IndependentRedraw(), RejectionVerifier(), init, proactive)


def coupled(init: "str | None" = None, proactive=None) -> Method:
    return _jacobi("coupled", CoupledRedraw(), RejectionVerifier(), init, proactive)


def gumbel(init: "str | None" = None, proactive=None) -> Method:
    return _jacobi("gumbel", GumbelRedraw(), RejectionVerifier(), init, proactive)


def exact(init: "str | None" = None, proactive=None) -> Method:
    return _jacobi("exact", GumbelRedraw(), GumbelMatchVerifier(), init, proactive, NoiseBranches)


def pac(init: "str | None" = None, proactive=(4, 3)) -> Method:
    """SJD-PAC's two levers: adaptive continuation (here, SCD's coupling) and proactive drafting, at its
    published shape (width 4, depth 3)."""
    return _jacobi("pac", CoupledRedraw(), RejectionVerifier(), init, proactive)


def lookup(fill: str | None = None) -> Method:
    """fill defaults to the layout's own: 'ngram' (1D), 'above' (2D), 'prev-frame' (3D)."""
    return Method("lookup", lambda layout: LookupDrafter(make_fill(fill or layout.default_lookup)),
                  RejectionVerifier())


def draft_model(model=None, sampling=None, proactive=None) -> Method:
    if model is None:
        raise ValueError("method 'draft-model' needs a draft model: {'name': 'draft-model', 'model': ...}")
    branches = _branches(proactive, ModelBranches)
    nodes = 0 if branches is None else branches.nodes  # the draft model's cache has room for the branches
    return _with_branches("draft-model", lambda layout: DraftModelDrafter(model, sampling, nodes), RejectionVerifier(),
                          branches)


# a token tree's shape unless told (`eagle(tree=True)`): nodes, and children per expanded node; the fastest on code-text
# of those measured at window 8 (benchmarks/README.md, "Token trees")
TREE_NODES, TREE_TOP_K = 32, 4
# where a head's chain stops on text unless told (`eagle(stop=...)`): the fastest on code-text at 1 row of 0.05-0.12
# (benchmarks/README.md, "A head's chain that stops where it is unsure")
STOP = 0.1


def _tree_shape(tree) -> "tuple[int, int] | None":
    """None, True (the default shape), NODES or [NODES, TOP_K] -> (nodes, top_k) or None."""
    if tree is None or tree is False:
        return None
    if tree is True:
        return TREE_NODES, TREE_TOP_K
    shape = [tree, TREE_TOP_K] if isinstance(tree, int) and not isinstance(tree, bool) else tree
    if not (isinstance(shape, (tuple, list)) and len(shape) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in shape)):
        raise ValueError(f"tree must be NODES or [NODES, TOP_K], ints >= 1, got {tree!r}")
    return shape[0], shape[1]


def eagle(head=None, exact: bool = False, jacobi: "int | None" = None, init: "str | None" = None,
          proactive=None, tree=None, lookup: "bool | None" = None, stop: "float | None" = None) -> Method:
    """head: an EagleHead or a head folder (mmspec.reference.eagle). exact: drafts are argmax(log q + g) with each
    position's own noise and the verifier accepts AR's token only (the tokens of `ar` with the same seed); else
    drafts are drawn from q and verified by rejection sampling. jacobi: the head drafts the first `jacobi` slots
    of each window and a Jacobi window the rest (exact: Gumbel redraws, else SCD's coupling; `init` fills it).
    proactive: (width, depth) branches at slot 0, each sibling continued by the head (not with jacobi).
    tree: True, NODES or [NODES, TOP_K]: EAGLE-2's token tree of NODES nodes as deep as the window's drafts, TOP_K
    children per expanded node (mmspec.drafters.tree; default [32, 4]), verified by AR's own draws, so its tokens
    are `ar`'s with or without `exact` (not with jacobi or proactive). lookup: in a step where the layout's lookup
    (n-gram on text) drafts a first token the head finds the most likely, the lookup's drafts instead of the head's
    chain or tree (mmspec.drafters.lookup.LookupOrDrafter); None: on 1D layouts (text), where copies of earlier
    text are common, unless with jacobi or proactive (not with those). stop: the head's chain ends after a slot
    whose most likely token has a probability below `stop` under the head, in every row (0: the whole window
    always); None: `STOP` on 1D layouts, 0 on grids, where it was not measured to pay. A row's draft then depends
    on its batch (its sampled tokens too, never their law nor `exact`'s). Options that do not combine are refused
    where the spec is parsed (`Spec.parse`, by the registry entry's `combines`)."""
    from mmspec.drafters.eagle import EagleDrafter
    from mmspec.drafters.lookup import LookupOrDrafter
    from mmspec.drafters.splice import SplicedDrafter
    from mmspec.drafters.tree import TreeDrafter
    from mmspec.reference.eagle import EagleHead, load_head

    if head is None:
        raise ValueError("method 'eagle' needs a draft head: {'name': 'eagle', 'head': FOLDER or EagleHead} "
                         "(bundled models ship theirs in head/)")
    if not isinstance(head, (EagleHead, _GivenLater)):  # (a check's stand-in: the caller gives its head later)
        head = load_head(head)
    shape = _tree_shape(tree)
    draw, verifier = ("gumbel", GumbelMatchVerifier()) if exact else ("sample", RejectionVerifier())
    redraw = GumbelRedraw() if exact else CoupledRedraw()
    branches = _branches(proactive, NoiseModelBranches if exact else ModelBranches)
    nodes = 0 if branches is None else branches.nodes  # the head's cache has room for the branches

    def with_lookup(layout: Layout, drafter: Drafter, judge: EagleDrafter) -> Drafter:
        if not (lookup if lookup is not None else layout.axes == 1 and proactive is None):
            return drafter
        return LookupOrDrafter(LookupDrafter(make_fill(layout.default_lookup)), drafter, judge)

    if shape is not None:
        nodes, top_k = shape

        def make_tree(layout: Layout) -> Drafter:
            chain = EagleDrafter(head, draw, tree_level=top_k)
            return with_lookup(layout, TreeDrafter(chain, nodes, top_k), chain)

        # the chains among a tree method's drafts (the lookup's, the first window's) are verified on AR's draws too,
        # so the tokens are `ar`'s with or without `exact`
        return Method("eagle", make_tree, TreeVerifier(GumbelMatchVerifier()), tree_nodes=nodes)

    def make(layout: Layout) -> Drafter:
        drafter = EagleDrafter(head, draw, nodes, stop=(STOP if layout.axes == 1 else 0.0) if stop is None else stop)
        if jacobi is None:
            return with_lookup(layout, drafter, drafter)
        return SplicedDrafter(drafter, JacobiDrafter(redraw, make_fill(init or layout.default_init)), jacobi)

    return _with_branches("eagle", make, verifier, branches)


# What a call does unless told otherwise (mmspec.generate and the pipelines): the tokens of plain AR with the same
# seed (`exact`), with the window picked at every step from measured costs and acceptance (1, plain AR, included).
DEFAULT_METHOD = "exact"
DEFAULT_WINDOW = "auto"

# what a method's output is, in the methods table
SAME_LAW, SAME_TOKENS = "`ar`'s distribution", "`ar`'s tokens for the seed"

# ---------------------------------------------------------------------------------------------------------------------
# The registry: every method by name, the options it takes and the resource a caller may supply. A spec ('coupled',
# {'name': 'coupled', 'init': 'above'}) is parsed once, where it enters (mmspec.generate, a pipeline, the CLI, a job
# file), into a Spec; the CLI's flags, a job's method keys and the demo's choices come from here.

def _fill(value):
    make_fill(value)  # an unknown policy fails now, not mid-generation
    return value


def _int_pair(value, name: str):
    if not (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in value)):
        raise ValueError(f"{name} must be (width, depth), two ints, got {value!r}")
    Branches(*value)  # candidates (width) >= 2, depth >= 1
    return list(value)


def _slots(value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"jacobi must be the head's slots, an int >= 1, or None, got {value!r}")
    return value


def _flag(name: str):
    def check(value):
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true, false or None, got {value!r}")
        return value
    return check


def _probability(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"stop must be a probability in [0, 1) or None, got {value!r}")
    return value


def _tree(value):
    _tree_shape(value)
    return value


def _eagle_combines(options: dict) -> None:
    """eagle's options that do not combine (each checked alone by its Option)."""
    jacobi, proactive, lookup, stop = (options.get(k) for k in ("jacobi", "proactive", "lookup", "stop"))
    tree = _tree_shape(options.get("tree"))
    beside = jacobi is not None or proactive is not None  # levers that share the window with the head
    if jacobi is not None and proactive is not None:
        raise ValueError("eagle takes proactive branches or a Jacobi window after the head's slots, not both")
    if tree is not None and beside:
        raise ValueError("eagle's token tree takes the whole window: no proactive branches or Jacobi window with it")
    if lookup and beside:
        raise ValueError("eagle's lookup drafts whole windows: no proactive branches or Jacobi window with it")
    if stop and tree is not None:
        raise ValueError("eagle's token tree picks its nodes by the head's confidence itself: no stop with it")


def _head(value):
    if isinstance(value, (str, PathLike)):
        check_folder(value, "EAGLE-3 head")  # checked to be a head here, loaded where resources are bound
    return value


def _as_is(value):
    return value


def _cli_pair(text: str) -> "list[int]":
    try:
        width, depth = (int(x) for x in text.split(","))
    except ValueError:
        raise ValueError(f"--proactive: expected WIDTH,DEPTH (e.g. 8,3), got {text!r}") from None
    return [width, depth]


def _cli_tree(text: str) -> "int | list[int] | bool":
    if text == "":  # --tree alone: the default shape
        return True
    try:
        shape = [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--tree: expected NODES or NODES,TOP_K (e.g. 32,8), got {text!r}") from None
    return shape[0] if len(shape) == 1 else shape


@dataclass(frozen=True)
class Option:
    """One method option: `check` takes a given value to the value (or raises ValueError); `flag` the argparse
    keywords of its command-line flag --NAME (None: none, as for a Python object), `parse` the flag's text to a
    value; `path`: a folder, relative to a job file where a job names it."""
    help: str
    check: Callable[[Any], Any] = _as_is
    flag: "dict | None" = None
    parse: "Callable[[str], Any] | None" = None
    path: bool = False


OPTIONS: dict[str, Option] = {
    "init": Option("fill policy for fresh window slots: random, left, above, prev-frame, ngram, pool (default: "
                   "prev-frame for video, random otherwise)", _fill, {}),
    "fill": Option("the lookup's fill policy (default: ngram for text, above for images, prev-frame for video)",
                   _fill, {}),
    "proactive": Option("WIDTH-1 siblings of the window's first draft, each heading DEPTH tokens, verified in the "
                        "same forward (pac: 4,3)", lambda v: _int_pair(v, "proactive"), {"metavar": "WIDTH,DEPTH"},
                        _cli_pair),
    "model": Option("the draft model (a pipeline's own unless given)"),
    "sampling": Option("the draft model's sampling (default: the target's)"),
    "head": Option("a draft head folder (mmspec's or a published EAGLE-3 one; default: the model folder's head/)",
                   _head, {"metavar": "DIR"}, path=True),
    "exact": Option("draft and verify on AR's noise, so the tokens are those of --method ar with the same seed "
                    "(default: rejection sampling, the same law)", _flag("exact"),
                    {"action": "store_true", "default": None}),
    "jacobi": Option("the head drafts the first N slots of each window, a Jacobi window the rest (--init fills it)",
                     _slots, {"type": int, "metavar": "N"}),
    "tree": Option("EAGLE-2's token tree of NODES nodes, TOP_K children per expanded node, as deep as the window's "
                   "drafts (alone: 32,4; TOP_K default 4): the same tokens as --method ar with the same seed", _tree,
                   {"metavar": "NODES[,TOP_K]", "nargs": "?", "const": ""}, _cli_tree),
    "lookup": Option("the n-gram lookup's drafts in the steps where the head agrees with its first one (default: on "
                     "for text, off for images and video)", _flag("lookup"),
                     {"action": argparse.BooleanOptionalAction, "default": None}),
    "stop": Option("the head's chain ends after a slot whose most likely token has probability below P under the "
                   "head (default: 0.1 for text, 0 for images and video: the whole window)", _probability,
                   {"type": float, "metavar": "P"}),
}


@dataclass(frozen=True)
class Entry:
    """A registered method: `build(**options) -> Method`, the options it takes (from OPTIONS), `needs`, the option
    that holds a resource (a draft model, a head) a caller may supply when the spec names none, its row of the
    methods table (`method_table`): how it drafts, how it verifies, what its output is, and `combines`, which refuses
    options that do not go together (options -> None or ValueError), run once where a spec is parsed."""
    build: Callable[..., Method]
    drafting: str
    verification: str
    output: str = SAME_LAW
    options: tuple[str, ...] = ()
    needs: "str | None" = None
    combines: "Callable[[dict], None] | None" = None


_JACOBI = ("init", "proactive")
REJECTION = "rejection sampling"
REGISTRY: dict[str, Entry] = {
    "ar": Entry(ar, "none", "plain sampling (Gumbel-max on the position noise)", "the baseline"),
    "draft-model": Entry(draft_model, "a small AR model (a text pipeline's draft model)", REJECTION,
                         options=("model", "sampling", "proactive"), needs="model"),
    "lookup": Entry(lookup, "n-gram (1D), row above (2D), previous frame (3D)", REJECTION, options=("fill",)),
    "jacobi": Entry(jacobi, "Jacobi window, independent redraws (SJD)", REJECTION, options=_JACOBI),
    "coupled": Entry(coupled, "Jacobi window, maximal coupling of successive drafts (SCD-MC)", REJECTION,
                     options=_JACOBI),
    "gumbel": Entry(gumbel, "Jacobi window, per-position Gumbel drafts (SCD-GS)", REJECTION, options=_JACOBI),
    "exact": Entry(exact, "Jacobi window, per-position Gumbel drafts", "argmax on the same noise", SAME_TOKENS,
                   _JACOBI),
    "pac": Entry(pac, "`coupled` with proactive branches at the first slot (SJD-PAC)", "recursive rejection sampling",
                 options=_JACOBI),
    "eagle": Entry(eagle, "a draft head on the target's own features (EAGLE-3; the model folder's `head/`), "
                   "optionally then a Jacobi window; on text the n-gram lookup's drafts instead in the steps where the "
                   "head agrees with their first token (`lookup`); with `tree`, the head's token tree, branching at "
                   "every depth (EAGLE-2)", "rejection sampling, or argmax on the noise (`exact`); a tree descends by "
                   "`ar`'s draws on the noise", f"{SAME_LAW} (`exact`, `tree`: {SAME_TOKENS})",
                   ("head", "exact", "jacobi", "init", "proactive", "tree", "lookup", "stop"), needs="head",
                   combines=_eagle_combines),
    "unigram": Entry(lambda: Method("unigram", lambda layout: UnigramDrafter(), RejectionVerifier()),
                     "each slot drawn from the row's own token counts (the registry's example method)", REJECTION),
}
METHODS: dict[str, Callable[..., Method]] = {name: entry.build for name, entry in REGISTRY.items()}


def method_table() -> str:
    """The methods table in markdown, a row per registered method, as README.md and docs/methods.md hold it."""
    rows = [f"| `{name}` | {e.drafting} | {e.verification} | {e.output} |" for name, e in REGISTRY.items()]
    return "\n".join(["| `method` | drafting | verification | output |", "|---|---|---|---|", *rows])


def takers(option: str) -> list[str]:
    """The methods that take an option, in registry order."""
    return [name for name, entry in REGISTRY.items() if option in entry.options]


@dataclass(frozen=True)
class Spec:
    """A method spec, checked: its name and options (each checked by its Option). `needs`: the resource option the
    caller must supply (a draft model, a head), None when the spec names it or the method needs none."""
    name: str
    options: dict

    @classmethod
    def parse(cls, method: "str | dict[str, Any] | Spec") -> "Spec":
        """'coupled' or {'name': 'coupled', 'init': 'above'} -> a Spec; an unknown name, an option the method does
        not take, a bad value or options that do not combine (the entry's `combines`) raise ValueError."""
        if isinstance(method, Spec):
            return method
        options: dict[str, Any] = {}
        if isinstance(method, dict):
            options = dict(method)
            method = options.pop("name", None)
        if not isinstance(method, str) or method not in REGISTRY:
            raise ValueError(f"unknown method {method!r}; choose one of {sorted(REGISTRY)}")
        entry = REGISTRY[method]
        refuse_unknown(options, entry.options, f"method {method!r}")
        checked = {k: v if v is None else OPTIONS[k].check(v) for k, v in options.items()}
        if entry.combines is not None:
            entry.combines(checked)
        return cls(method, checked)

    @property
    def needs(self) -> "str | None":
        need = REGISTRY[self.name].needs
        return need if need is not None and self.options.get(need) is None else None

    @property
    def value(self) -> "str | dict[str, Any]":
        """The spec as given by a caller: its name alone when it has no options."""
        return {"name": self.name, **self.options} if self.options else self.name

    def bind(self, **resources) -> Method:
        """The Method, with `resources` (model=, head=) filling the option the spec needs and does not name."""
        options = dict(self.options)
        if self.needs is not None and resources.get(self.needs) is not None:
            options[self.needs] = resources[self.needs]
        return REGISTRY[self.name].build(**options)


def resolve_method(method: "str | dict[str, Any] | Spec | Method", draft_model=None, head=None) -> Method:
    """'coupled', {'name': 'coupled', 'init': 'above'}, a Spec or a Method object -> a Method, with `draft_model` (a
    pipeline's draft model) or `head` (a bundled model's draft head) for a spec that needs it and names none."""
    if isinstance(method, Method):
        return method
    return Spec.parse(method).bind(model=draft_model, head=head)


class _GivenLater:
    """Stands for a draft model or head the caller gives when it runs (a pipeline's, loaded after the check)."""


def check_method(method: "str | dict[str, Any] | Spec | Method", has_draft_model: bool = False) -> Method:
    """Refuse an unknown method or bad options before any work (building a Method loads nothing: a head named by
    its folder is checked to be one, not loaded) -> the Method, for its name, window and tree nodes.
    has_draft_model: the caller will give a draft model (or head) when it runs."""
    if isinstance(method, Method):
        return method
    spec = Spec.parse(method)
    later = _GivenLater() if has_draft_model else None
    stand_ins = {k: _GivenLater() for k, v in spec.options.items() if OPTIONS[k].path and isinstance(v, (str, PathLike))}
    return Spec(spec.name, {**spec.options, **stand_ins}).bind(model=later, head=later)


def method_names(has_draft_model: bool = False, has_head: bool = False) -> list[str]:
    """The methods a caller can run by name: draft-model with a draft model, eagle with a head, the others always."""
    held = {"model": has_draft_model, "head": has_head}
    return [name for name, entry in REGISTRY.items() if entry.needs is None or held[entry.needs]]

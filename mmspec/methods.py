"""Methods: a drafter and a verifier, named. The loop never looks at the name.

| name        | drafting                                            | verification                  |
|-------------|-----------------------------------------------------|-------------------------------|
| ar          | none                                                | plain sampling (Gumbel-max)   |
| draft-model | small AR model, L-1 tokens                          | rejection sampling            |
| lookup      | n-gram (1D), row above (2D), previous frame (3D)    | rejection sampling            |
| jacobi      | Jacobi window, carried slots redrawn independently  | rejection sampling (SJD)      |
| coupled     | Jacobi window, maximal coupling of drafts (SCD-MC)  | rejection sampling            |
| gumbel      | Jacobi window, per-position Gumbel drafts (SCD-GS)  | rejection sampling            |
| exact       | Jacobi window, per-position Gumbel drafts           | argmax match on the same noise|
| pac         | coupled, with proactive branches at slot 0 (SJD-PAC)| recursive rejection sampling  |
| eagle       | a draft head on the target's features (EAGLE-3),    | rejection sampling, or argmax |
|             | optionally the first slots only, Jacobi the rest    | match (`exact`: ar's tokens)  |
|             | (or with proactive branches the head continues,     |                               |
|             | or a token tree: EAGLE-2's, branching at every depth)| (a tree: p's draws descend it)|

Every Jacobi method, draft-model and eagle take `proactive=(width, depth)`: slot 0 gets width - 1 siblings, each
heading a branch of depth tokens, verified in the same forward (mmspec.drafters.proactive, mmspec.tree).
"""
from __future__ import annotations

from dataclasses import dataclass
from os import PathLike
from typing import Any, Callable

from mmspec.drafters import (CoupledRedraw, DraftModelDrafter, Drafter, GumbelRedraw, IndependentRedraw,
                             JacobiDrafter, LookupDrafter, NoDraft, make_fill)
from mmspec.drafters.proactive import (Branches, FreshBranches, ModelBranches, NoiseBranches, NoiseModelBranches,
                                      ProactiveDrafter)
from mmspec.layouts import Layout
from mmspec.loading import check_folder
from mmspec.verify import (BranchVerifier, ChainVerifier, GumbelMatchVerifier, RejectionVerifier, TreeVerifier,
                           Verifier)


@dataclass(frozen=True)
class Method:
    name: str
    make_drafter: Callable[[Layout], Drafter]  # a fresh drafter for each generation
    verifier: Verifier
    window: int | None = None  # fixed window (ar: 1), else the caller's
    tree_nodes: int = 0  # window nodes a forward may add beside the chain (proactive branches)


def ar() -> Method:
    return Method("ar", lambda layout: NoDraft(), RejectionVerifier(), window=1)


def _branches(proactive, kind: type[Branches]) -> "Branches | None":
    if proactive is None:
        return None
    if not (isinstance(proactive, (tuple, list)) and len(proactive) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) for x in proactive)):
        raise ValueError(f"proactive must be (width, depth), two ints, got {proactive!r}")
    return kind(*proactive)


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
    if init is not None:
        make_fill(init)  # reject unknown policies now, not mid-generation
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
    if fill is not None:
        make_fill(fill)
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
    on its batch (its sampled tokens too, never their law nor `exact`'s)."""
    from mmspec.drafters.eagle import EagleDrafter, SplicedDrafter
    from mmspec.drafters.lookup import LookupOrDrafter
    from mmspec.drafters.tree import TreeDrafter
    from mmspec.reference.eagle import EagleHead, load_head

    if head is None:
        raise ValueError("method 'eagle' needs a draft head: {'name': 'eagle', 'head': FOLDER or EagleHead} "
                         "(bundled models ship theirs in head/)")
    if not isinstance(head, (EagleHead, _GivenLater)):  # (a check's stand-in: the caller gives its head later)
        head = load_head(head)
    if jacobi is not None and (isinstance(jacobi, bool) or not isinstance(jacobi, int) or jacobi < 1):
        raise ValueError(f"jacobi must be the head's slots, an int >= 1, or None, got {jacobi!r}")
    if jacobi is not None and proactive is not None:
        raise ValueError("eagle takes proactive branches or a Jacobi window after the head's slots, not both")
    shape = _tree_shape(tree)
    if shape is not None and (jacobi is not None or proactive is not None):
        raise ValueError("eagle's token tree takes the whole window: no proactive branches or Jacobi window with it")
    if lookup is not None and not isinstance(lookup, bool):
        raise ValueError(f"lookup must be true, false or None, got {lookup!r}")
    if lookup and (jacobi is not None or proactive is not None):
        raise ValueError("eagle's lookup drafts whole windows: no proactive branches or Jacobi window with it")
    if stop is not None and (isinstance(stop, bool) or not isinstance(stop, (int, float)) or not 0 <= stop < 1):
        raise ValueError(f"stop must be a probability in [0, 1) or None, got {stop!r}")
    if stop and shape is not None:
        raise ValueError("eagle's token tree picks its nodes by the head's confidence itself: no stop with it")
    if init is not None:
        make_fill(init)
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

METHODS: dict[str, Callable[..., Method]] = {
    "ar": ar, "draft-model": draft_model, "lookup": lookup, "jacobi": jacobi,
    "coupled": coupled, "gumbel": gumbel, "exact": exact, "pac": pac, "eagle": eagle,
}
# options a caller may hold and give a spec that names none (a pipeline's draft model, a bundled model's head)
SUPPLIED = {"draft-model": "model", "eagle": "head"}


def _parse(method: "str | dict[str, Any]") -> tuple[str, dict[str, Any]]:
    """'coupled' or {'name': 'coupled', 'init': 'above'} -> (name, options), the name checked."""
    options: dict[str, Any] = {}
    if isinstance(method, dict):
        options = dict(method)
        method = options.pop("name", None)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
    return method, options


def _needs(method, name_: str) -> bool:
    if isinstance(method, Method):
        return False
    name, options = _parse(method)
    return name == name_ and SUPPLIED[name] not in options


def needs_draft_model(method: "str | dict[str, Any] | Method") -> bool:
    """Whether a spec takes its draft model from the caller (resolve_method's draft_model): a draft-model method
    that names none."""
    return _needs(method, "draft-model")


def needs_head(method: "str | dict[str, Any] | Method") -> bool:
    """Whether a spec takes its draft head from the caller (resolve_method's head): an eagle method that names none."""
    return _needs(method, "eagle")


def resolve_method(method: "str | dict[str, Any] | Method", draft_model=None, head=None) -> Method:
    """'coupled', {'name': 'coupled', 'init': 'above'} or a Method object -> a Method. The one place where a
    spec meets what its caller holds: `draft_model` (a pipeline's draft model) is the model of a spec that
    needs one (needs_draft_model), `head` (a bundled model's draft head) the head of an eagle spec that names
    none (needs_head)."""
    if isinstance(method, Method):
        return method
    name, options = _parse(method)
    given = sorted(options)
    for held, needs in ((draft_model, needs_draft_model), (head, needs_head)):
        if held is not None and needs(method):
            options[SUPPLIED[name]] = held
    try:
        return METHODS[name](**options)
    except TypeError as err:
        raise ValueError(f"bad options {given} for method {name!r}: {err}") from None


class _GivenLater:
    """Stands for a draft model or head the caller gives when it runs (a pipeline's, loaded after the check)."""


def check_method(method: "str | dict[str, Any] | Method", has_draft_model: bool = False) -> Method:
    """Refuse an unknown method or bad options before any work (building a Method loads nothing: a head named by
    its folder is checked to be one, not loaded) -> the Method, for its name, window and width. has_draft_model:
    the caller will give a draft model (or head) when it runs."""
    later = _GivenLater() if has_draft_model else None
    if not isinstance(method, Method):
        name, options = _parse(method)
        if name == "eagle" and isinstance(options.get("head"), (str, PathLike)):
            check_folder(options["head"], "EAGLE-3 head")
            method = {**options, "name": name, "head": _GivenLater()}
    return resolve_method(method, draft_model=later, head=later)


def method_names(has_draft_model: bool = False, has_head: bool = False) -> list[str]:
    """The methods a caller can run by name: draft-model with a draft model, eagle with a head, the others always."""
    return [name for name in METHODS
            if (has_draft_model or not needs_draft_model(name)) and (has_head or not needs_head(name))]

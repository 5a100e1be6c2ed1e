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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from mmspec.drafters import (CoupledRedraw, DraftModelDrafter, Drafter, GumbelRedraw, IndependentRedraw,
                             JacobiDrafter, LookupDrafter, NoDraft, make_fill)
from mmspec.layouts import Layout
from mmspec.verify import GumbelMatchVerifier, RejectionVerifier, Verifier


@dataclass(frozen=True)
class Method:
    name: str
    make_drafter: Callable[[Layout], Drafter]  # a fresh drafter for each generation
    verifier: Verifier
    window: int | None = None  # fixed window (ar: 1), else the caller's


def ar() -> Method:
    return Method("ar", lambda layout: NoDraft(), RejectionVerifier(), window=1)


def _jacobi(name: str, redraw, verifier, init: str) -> Method:
    make_fill(init)  # reject unknown policies now, not mid-generation
    return Method(name, lambda layout: JacobiDrafter(redraw, make_fill(init)), verifier)


def jacobi(init: str = "random") -> Method:
    return _jacobi("jacobi", IndependentRedraw(), RejectionVerifier(), init)


def coupled(init: str = "random") -> Method:
    return _jacobi("coupled", CoupledRedraw(), RejectionVerifier(), init)


def gumbel(init: str = "random") -> Method:
    return _jacobi("gumbel", GumbelRedraw(), RejectionVerifier(), init)


def exact(init: str = "random") -> Method:
    return _jacobi("exact", GumbelRedraw(), GumbelMatchVerifier(), init)


def lookup(fill: str | None = None) -> Method:
    """fill defaults to the layout's own: 'ngram' (1D), 'above' (2D), 'prev-frame' (3D)."""
    if fill is not None:
        make_fill(fill)
    return Method("lookup", lambda layout: LookupDrafter(make_fill(fill or layout.default_lookup)),
                  RejectionVerifier())


def draft_model(model=None, sampling=None) -> Method:
    if model is None:
        raise ValueError("method 'draft-model' needs a draft model: {'name': 'draft-model', 'model': ...}")
    return Method("draft-model", lambda layout: DraftModelDrafter(model, sampling), RejectionVerifier())


METHODS: dict[str, Callable[..., Method]] = {
    "ar": ar, "draft-model": draft_model, "lookup": lookup, "jacobi": jacobi,
    "coupled": coupled, "gumbel": gumbel, "exact": exact,
}


def resolve_method(method: "str | dict[str, Any] | Method") -> Method:
    """'coupled', {'name': 'coupled', 'init': 'above'} or a Method object."""
    if isinstance(method, Method):
        return method
    options: dict[str, Any] = {}
    if isinstance(method, dict):
        options = dict(method)
        method = options.pop("name", None)
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
    try:
        return METHODS[method](**options)
    except TypeError as err:
        raise ValueError(f"bad options {sorted(options)} for method {method!r}: {err}") from None

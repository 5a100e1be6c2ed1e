"""The acceptance suite's plots: NFE ratio against the window beside the published points and the issue's
targets; acceptance per window slot; per slot, 1 - TV between successive Jacobi iterations against the
acceptance measured, and the entropy of p where tokens were committed."""
from __future__ import annotations

from pathlib import Path

from benchmarks.suite.acceptance_report import GRID_KINDS, at_default, count_rows
from benchmarks.suite.plots import log2_x, pyplot, save_figure
from benchmarks.suite.published import PUBLISHED, TARGETS, TEXT_TARGET_WINDOW

KINDS = GRID_KINDS + ("text",)
MARKERS = "sPD*Xv^"  # one per published point of a panel


def write_plots(result: dict, folder: str | Path) -> list[Path]:
    paths = []
    for name, draw in (("nfe_window.png", _nfe_window), ("acceptance_slot.png", _acceptance_slot),
                       ("diagnosis.png", _diagnosis)):
        fig = draw(result)
        if fig is not None:
            paths.append(save_figure(fig, Path(folder) / name))
    return paths


def _panels(rows: int, kinds: list[str]):
    return pyplot().subplots(rows, len(kinds), figsize=(6 * len(kinds), 5 * rows), squeeze=False)


def _nfe_window(result: dict):
    rows = [r for r in count_rows(result) if r["name"] != "ar"]
    kinds = [k for k in KINDS if any(r["kind"] == k for r in rows)]
    if not kinds:
        return None
    fig, axes = _panels(1, kinds)
    for ax, kind in zip(axes[0], kinds):
        mine = [r for r in rows if r["kind"] == kind]
        metric = "generated_mean_acceptance_length" if kind == "text" else "generated_nfe_ratio"
        for method in dict.fromkeys(r["method"] for r in mine):
            ax.plot(*zip(*sorted((r["window"], r[metric]) for r in mine if r["method"] == method)), marker="o",
                    label=method)
        ticks = [r["window"] for r in mine]
        if kind == "text":
            ax.plot([TEXT_TARGET_WINDOW], [TARGETS["text"]], "r*", markersize=12,
                    label=f"target: draft-model {TARGETS['text']} at w={TEXT_TARGET_WINDOW}")
            ax.set_ylabel("mean acceptance length (tokens / forward)")
        else:
            ticks += _published(ax, kind)
            for key, style in ((kind, "r:"), (f"{kind} exact", "m:")):
                if key in TARGETS:
                    ax.axhline(TARGETS[key], color=style[0], linestyle=style[1:], label=f"target {key}: {TARGETS[key]}x")
            ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="ar")
            ax.set_ylabel("NFE ratio vs ar (generated tokens)")
        log2_x(ax, ticks)
        ax.set_xlabel("window (positions verified per forward)")
        ax.set_title(f"{kind}, {mine[0]['rows']} rows")
        _legend(ax)
    return fig


def _published(ax, kind: str) -> list[int]:
    """The published points of a panel, black markers labelled with their paper and model -> their windows."""
    points = [p for p in PUBLISHED if p.kind == kind]
    for p, marker in zip(points, MARKERS):
        ax.plot([p.window], [p.ratio], marker=marker, color="black", linestyle="none", markerfacecolor="none",
                label=f"published, {p.model}: {p.method} {p.ratio}x")
    return [p.window for p in points]


def _acceptance_slot(result: dict):
    rows = at_default(result)
    kinds = [k for k in KINDS if any(r["kind"] == k for r in rows)]
    if not kinds:
        return None
    fig, axes = _panels(1, kinds)
    for ax, kind in zip(axes[0], kinds):
        for r in (r for r in rows if r["kind"] == kind):
            ax.plot(range(len(r["acceptance_per_position"])), r["acceptance_per_position"], marker=".",
                    label=f"{r['method']} w={r['window']}")
        ax.set_title(f"{kind}: acceptance per window slot, default window")
        ax.set_xlabel("window slot (0: the first draft)")
        ax.set_ylabel("share of forwards accepting the slot")
        _legend(ax)
    return fig


def _diagnosis(result: dict):
    rows = [r for r in at_default(result) if r["diagnosis"].get("tv")]
    kinds = [k for k in KINDS if any(r["kind"] == k for r in rows)]
    if not kinds:
        return None
    ar = {r["kind"]: r["diagnosis"].get("mean_entropy") for r in count_rows(result) if r["name"] == "ar"}
    fig, axes = _panels(2, kinds)
    colours = pyplot().rcParams["axes.prop_cycle"].by_key()["color"]
    for col, kind in enumerate(kinds):
        top, bottom = axes[0][col], axes[1][col]
        for r, colour in zip((r for r in rows if r["kind"] == kind), colours):
            d = r["diagnosis"]
            label = f"{r['method']} w={r['window']}"
            _line(top, d["carried_pass"], colour, "-", f"{label}: measured")
            _line(top, d["expected"], colour, "--", f"{label}: 1 - TV")
            _line(bottom, d["entropy"], colour, "-", label)
        top.set_title(f"{kind}: carried drafts passing their test, default window")
        if ar.get(kind) is not None:
            bottom.axhline(ar[kind], color="grey", linestyle="--", label=f"ar, every position: {ar[kind]:.2f}")
        bottom.set_title(f"{kind}: entropy of p where tokens were committed")
        top.set_ylabel("acceptance of carried drafts")
        bottom.set_ylabel("nats")
        for ax in (top, bottom):
            ax.set_xlabel("window slot")
            _legend(ax)
    return fig


def _legend(ax) -> None:
    """Below the axes, where it hides no point (save_figure keeps it in the picture)."""
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)


def _line(ax, values: list, colour: str, style: str, label: str) -> None:
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if points:
        ax.plot(*zip(*points), color=colour, linestyle=style, marker=".", label=label)

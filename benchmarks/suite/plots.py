"""A suite's plots as PNGs: wall-clock ratio against batch size, NFE and wall-clock ratios against the window.
matplotlib (the dev / demo extra) is imported here only, so nothing else needs it."""
from __future__ import annotations

from pathlib import Path

from benchmarks.suite.report import grid_rows, on_cpu


def pyplot():
    """matplotlib's pyplot, drawing to files only (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # "tight": legends placed outside the axes stay in
    pyplot().close(fig)
    return path


def log2_x(ax, ticks) -> None:
    """A log2 x axis labelled at `ticks` (batch sizes, windows)."""
    ax.set_xscale("log", base=2)
    ticks = sorted(set(ticks))
    ax.set_xticks(ticks, [str(t) for t in ticks])


def write_plots(result: dict, folder: str | Path) -> list[Path]:
    plt = pyplot()
    folder, paths = Path(folder), []
    cpu = ("cpu_ratio",) * on_cpu(result)
    plots = (("batch.png", "rows", "rows (batch size)", ("wall_ratio", *cpu)),
             ("window.png", "window", "window (positions verified per forward), 1 row", ("nfe_ratio", "wall_ratio", *cpu)))
    for name, sweep, xlabel, metrics in plots:
        rows = [r for r in grid_rows(result, sweep) if r["name"] != "ar"]
        kinds = sorted({r["kind"] for r in rows})
        if not kinds:
            continue
        fig, axes = plt.subplots(len(metrics), len(kinds), figsize=(5.5 * len(kinds), 3.8 * len(metrics)),
                                 squeeze=False)
        for col, kind in enumerate(kinds):
            for row, metric in enumerate(metrics):
                _lines(axes[row][col], [r for r in rows if r["kind"] == kind], sweep, metric)
                axes[row][col].set_title(f"{kind}: {_YLABEL[metric]}")
                axes[row][col].set_xlabel(xlabel)
        paths.append(save_figure(fig, folder / name))
    return paths


_YLABEL = {"wall_ratio": "wall-clock ratio vs ar", "nfe_ratio": "NFE ratio vs ar", "cpu_ratio": "CPU-time ratio vs ar"}


def _lines(ax, rows: list[dict], sweep: str, metric: str) -> None:
    """One line per method over the sweep's x (rows or window, log2 axis), and ar's level at 1."""
    x_of = (lambda r: r["rows"]) if sweep == "rows" else (lambda r: r["window"])
    line_of = (lambda r: r["method"]) if sweep == "rows" else (lambda r: r["name"])  # window labels carry the window
    for line in dict.fromkeys(map(line_of, rows)):
        points = sorted((x_of(r), r[metric]) for r in rows if line_of(r) == line)
        ax.plot(*zip(*points), marker="o", label=line)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="ar")
    log2_x(ax, [x_of(r) for r in rows])
    ax.set_ylabel(_YLABEL[metric])
    ax.legend(fontsize=8)

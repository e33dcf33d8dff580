"""Phase diagrams of a sweep (``ctxstair.sweep``): numbers of ``sweep.csv`` against
the grid.

With one grid key, each panel plots the number against the key's values: every member as a dot,
the median of each cell as a line. With two or more keys, each panel is a heatmap over the first two
keys (first key along x) whose colour and text are the median over the cell's members — and over
the values of any further keys, which the caption says. A cell where the number is undefined for
some members (say, no takeover within the run) shows how many members it is defined for; a cell
where it is undefined for all shows "none".
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ctxstair.report.figures import house_style

#: (file, title, [(column, label, log colour scale)]) of each figure; alignment figures need analysis.
_EPOCH_FIGURE = ("phase_epochs.png", "When the staircase steps happen",
                 [("order0_max_epoch", "epoch of the order-0 maximum", True),
                  ("takeover_epoch", "epoch of the order-1 takeover", True)])
_ALIGNMENT_FIGURE = ("phase_alignment.png", "How far the embeddings align",
                     [("order0_max", "order-0 Pearson at its maximum", False),
                      ("order1_probe_zero_mean_end", "zero-mean order-1 probe at the end (held-out)", False)])
_TRAINING_FIGURE = ("phase_training.png", "Whether and when the task is learned",
                    [("acc100_epoch", "first epoch at 100 % training accuracy", True),
                     ("loss_end", "training loss at the end", True)])


#: The phase diagrams of a language-model sweep (``lm-staircase``): the course of ρ_next.
_LM_SHAPE_FIGURE = ("phase_rho_next.png", "How high ρ_next peaks and how far it falls back",
                    [("peak_rise", "ρ_next peak minus its initial value", False),
                     ("decay_fraction", "fall from the peak to the end, as a fraction of the peak", False)])
_LM_TIMING_FIGURE = ("phase_peak_step.png", "When ρ_next peaks, and the held-out loss reached",
                     [("peak_fraction", "step of the ρ_next peak / training steps", False),
                      ("val_loss_end", "held-out next-token loss at the end (nats)", False)])
_LM_TRAINING_FIGURE = ("phase_training.png", "What each cell cost and reached",
                       [("train_seconds", "training time (s, 2-core CPU unless stated)", True),
                        ("val_loss_end", "held-out next-token loss at the end (nats)", False)])


def phase_figures(rows: list[dict[str, Any]], grid: dict[str, list[Any]], analysed: bool, lm: bool = False
                  ) -> dict[str, tuple[str, plt.Figure]]:
    """File name -> (caption, figure) of every phase diagram of a sweep's ``rows`` (``sweep.csv``
    rows, with the grid keys as columns); ``lm``: a language-model sweep (ρ_next numbers)."""
    keys = list(grid)
    pooled = f" Medians also pool the values of {', '.join(keys[2:])}." if len(keys) > 2 else ""
    figures = {}
    for name, title, panels in phase_specs(analysed, lm):
        fig = phase_figure(rows, grid, panels, title)
        caption = (f"{title}: " + "; ".join(label for _, label, _ in panels)
                   + (f", against {keys[0]}: each dot a member, the line the median of a cell." if len(keys) == 1 else
                      f", median over each cell's members, {keys[0]} along x and {keys[1]} along y.{pooled}"))
        figures[name] = (caption, fig)
    return figures


def phase_specs(analysed: bool, lm: bool) -> list[tuple[str, str, list[tuple[str, str, bool]]]]:
    """``(file, title, [(column, label, log colour scale)])`` of each phase diagram of a sweep, in
    order; ``analysed``: the sweep ran the analysis; ``lm``: a language-model sweep."""
    if lm:
        return ([_LM_SHAPE_FIGURE, _LM_TIMING_FIGURE] if analysed else []) + [_LM_TRAINING_FIGURE]
    return ([_EPOCH_FIGURE, _ALIGNMENT_FIGURE] if analysed else []) + [_TRAINING_FIGURE]


@house_style
def phase_figure(rows: list[dict[str, Any]], grid: dict[str, list[Any]], panels: list[tuple[str, str, bool]],
                 title: str) -> plt.Figure:
    """One panel per ``(column, label, log)``: a line plot over the only grid key, or a heatmap over
    the first two (module docstring)."""
    keys = list(grid)
    fig, axes = plt.subplots(1, len(panels), figsize=(2.6 * len(panels), 2.6), layout="constrained", squeeze=False)
    for ax, (column, label, log) in zip(axes[0], panels):
        if len(keys) == 1:
            _line_panel(ax, rows, keys[0], grid[keys[0]], column, label, log)
        else:
            _heatmap_panel(ax, rows, keys[:2], [grid[k] for k in keys[:2]], column, label, log)
    fig.suptitle(f"{title} across the sweep")
    return fig


def _values(rows: list[dict[str, Any]], column: str, selection: dict[str, Any]) -> tuple[np.ndarray, int]:
    """The defined values of ``column`` in the rows matching ``selection``, and how many rows matched."""
    chosen = [r for r in rows if all(r[k] == v for k, v in selection.items())]
    values = np.array([r[column] for r in chosen if r[column] is not None and not np.isnan(r[column])], dtype=float)
    return values, len(chosen)


def _positions(values: list[Any]) -> tuple[np.ndarray, bool]:
    """x positions of grid values: the numbers themselves when all are numeric (then also True), else 0, 1, 2, ..."""
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    return (np.array(values, dtype=float) if numeric else np.arange(len(values), dtype=float)), numeric


def _line_panel(ax: plt.Axes, rows, key: str, values: list[Any], column: str, label: str, log: bool) -> None:
    xs, _ = _positions(values)
    medians, ticks = [], []
    for x, value in zip(xs, values):
        found, total = _values(rows, column, {key: value})
        ax.scatter(np.full(found.size, x), found, s=18, color="#1f77b4", alpha=0.6, edgecolors="none")
        medians.append(np.median(found) if found.size else np.nan)
        ticks.append(str(value) + (f"\n(defined {found.size}/{total})" if found.size < total else ""))
    ax.plot(xs, medians, color="#1f77b4", lw=1.5, marker="o", ms=4, label="median over members")
    ax.set_xticks(xs, ticks)
    if log and all(m > 0 for m in medians if not np.isnan(m)) and np.any(~np.isnan(medians)):
        ax.set_yscale("log")
        _plain_numbers(ax.yaxis)
    pad = 0.12 * (np.ptp(xs) or 1.0)  # every grid value keeps its tick, even one with no defined value
    ax.set_xlim(xs.min() - pad, xs.max() + pad)
    ax.set_xlabel(key)
    ax.set_ylabel(label + (" (log scale)" if ax.get_yscale() == "log" else ""))
    ax.set_title(label)
    ax.legend(loc="best")


def _heatmap_panel(ax: plt.Axes, rows, keys: list[str], values: list[list[Any]], column: str, label: str,
                   log: bool) -> None:
    (kx, ky), (vx, vy) = keys, values
    grid = np.full((len(vy), len(vx)), np.nan)
    texts = {}
    for i, y_value in enumerate(vy):
        for j, x_value in enumerate(vx):
            found, total = _values(rows, column, {kx: x_value, ky: y_value})
            if found.size:
                grid[i, j] = np.median(found)
            texts[i, j] = ("none" if not found.size else _number(grid[i, j])
                           + (f"\n{found.size}/{total}" if found.size < total else ""))
    positive = grid[~np.isnan(grid)]
    norm = LogNorm(positive.min(), positive.max()) if log and positive.size and positive.min() > 0 and \
        positive.max() > positive.min() else None
    image = ax.imshow(np.ma.masked_invalid(grid), origin="lower", aspect="auto", cmap="viridis", norm=norm)
    for (i, j), text in texts.items():
        ax.text(j, i, text, ha="center", va="center", fontsize="small",
                color="white" if np.isnan(grid[i, j]) else "black",
                bbox=dict(boxstyle="round,pad=0.15", fc="white", alpha=0.6, lw=0))
    ax.set_xticks(range(len(vx)), [str(v) for v in vx])
    ax.set_yticks(range(len(vy)), [str(v) for v in vy])
    ax.set_xlabel(kx)
    ax.set_ylabel(ky)
    ax.set_facecolor("#cccccc")
    ax.set_title(label)
    bar = ax.figure.colorbar(image, ax=ax, label=label + (" (log colour scale)" if norm is not None else ""))
    if norm is not None:
        _plain_numbers(bar.ax.yaxis)


def _plain_numbers(axis) -> None:
    """Ticks at 1, 2, 5 × 10^k labelled as plain numbers (200, 500, 1000) on a log axis."""
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _number(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.3g}"


@house_style
def rho_next_curves_figure(courses: dict[str, dict]) -> plt.Figure:
    """ρ_next (left) and the held-out loss (right) against the training step for every cell of a
    language-model sweep, one colour per cell; ``courses``: cell label -> the dict of
    :func:`ctxstair.analysis.measures.rho_next_course`. The step axis is linear up to 10, then log."""
    rows_of_labels = -(-len(courses) // 3)
    fig, (left, right) = plt.subplots(1, 2, figsize=(7.2, 2.8 + 0.13 * rows_of_labels), layout="constrained")
    colours = plt.cm.viridis(np.linspace(0, 0.95, max(1, len(courses))))
    for colour, (label, course) in zip(colours, courses.items()):
        left.plot(course["steps"], course["rho"], color=colour, lw=1.4, marker="o", ms=2, label=label)
        right.plot(course["val_steps"], course["val_loss"], color=colour, lw=1.4, marker="o", ms=2)
    for ax, ylabel, title in ((left, "ρ_next (Pearson, upper triangle)", "ρ_next over training"),
                              (right, "held-out next-token loss (nats)", "held-out loss over training")):
        ax.set_xscale("symlog", linthresh=10)
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
    fig.legend(*left.get_legend_handles_labels(), loc="outside lower center", ncol=3)
    fig.suptitle(f"ρ_next and held-out loss of all {len(courses)} cells")
    return fig

"""Figures of ``activation-order`` (SPEC §8 F4): heatmaps over sequence length L and activation
power K, and accuracy curves per L."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair.analysis import measures as ms
from ctxstair.report.figures import house_style, plt


@house_style
def cell_heatmap(cells: dict, Ls: list[int], Ks: list[int], key: str, label: str, *, vmin: float, vmax: float,
             cmap: str) -> plt.Figure:
    """Heatmap over rows L and columns K of the median over members of ``cells[...][key]``, each cell
    annotated with its value, the K = L boundary drawn as a staircase."""
    grid = np.full((len(Ls), len(Ks)), np.nan)
    for c in cells.values():
        grid[Ls.index(c["L"]), Ks.index(c["K"])] = float(np.median(c[key]))
    fig, ax = plt.subplots(figsize=(0.6 * len(Ks) + 1.6, 0.45 * len(Ls) + 1.2), layout="constrained")
    image = ax.imshow(grid, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    for i in range(len(Ls)):
        for j in range(len(Ks)):
            if np.isfinite(grid[i, j]):
                bright = (grid[i, j] - vmin) / (vmax - vmin) > 0.6
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize="small",
                        color="black" if bright else "white")
    # the boundary K = L: left of it K < L (unreachable), right of it K ≥ L
    for i, L in enumerate(Ls):
        if L in Ks:
            ax.plot([Ks.index(L) - 0.5] * 2, [i - 0.5, i + 0.5], color="white", lw=2.5)
            ax.plot([Ks.index(L) - 0.5] * 2, [i - 0.5, i + 0.5], color="black", lw=1.0)
    ax.set_xticks(range(len(Ks)), [str(k) for k in Ks])
    ax.set_yticks(range(len(Ls)), [str(L) for L in Ls])
    ax.set_xlabel("activation power K (σ(z) = z^K)")
    ax.set_ylabel("sequence length L")
    ax.set_title(f"{label}\n(line: K = L; right of it K ≥ L)")
    fig.colorbar(image, ax=ax, label=label)
    return fig


@house_style
def accuracy_curves(paths: dict[str, Path], cells: dict, Ls: list[int]) -> plt.Figure:
    """Median training accuracy over members against epochs, one panel per sequence length L and one
    curve per power K (dashed where K < L), chance dotted; ``paths``: part -> run directory."""
    fig, axes = plt.subplots(1, len(Ls), figsize=(2.4 * len(Ls), 2.2), squeeze=False, layout="constrained",
                             sharey=True)
    colours = plt.get_cmap("viridis")
    for ax, L in zip(axes[0], Ls):
        parts = sorted((c["K"], part) for part, c in cells.items() if c["L"] == L)
        for j, (K, part) in enumerate(parts):
            run = paths[part]
            series = [ms.metric_series(run, m, "acc") for m in ms.members(run)]
            epochs = series[0][0]
            median = np.median(np.stack([s[1] for s in series]), axis=0)
            ax.plot(epochs, median, color=colours(j / max(1, len(parts) - 1)), ls="-" if K >= L else "--",
                    label=f"K = {K}")
        chance = cells[parts[0][1]]["chance"] if parts else 0.0
        ax.axhline(chance, color="0.6", lw=0.8, ls=":")
        ax.set_xscale("symlog", linthresh=10)
        ax.set_xlim(0, max(c["epochs"] for c in cells.values()))
        ax.set_xlabel("epoch")
        ax.set_title(f"L = {L} (dashed: K < L)")
    axes[0][0].set_ylabel("training accuracy")
    axes[0][-1].legend(loc="center right")
    return fig

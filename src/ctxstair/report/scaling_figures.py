"""Figure of ``init-scaling`` (SPEC §6.2): RMS of each order's term over order 0 against the width d,
with the fitted and the predicted slopes."""

from __future__ import annotations

import numpy as np

from ctxstair.report.figures import house_style, plt
from ctxstair.report.formats import fmt


@house_style
def scaling_figure(widths: list[int], gammas: list[float], ratios: np.ndarray, fits: dict) -> plt.Figure:
    """RMS(order m) / RMS(order 0) against d on log-log axes, one panel per order m ≥ 1, one colour per γ;
    ``ratios`` (G, D, M+1), ``fits[γ][m-1]`` the fitted slopes (:func:`ctxstair.theory.fit_order_slopes`)."""
    orders = ratios.shape[-1] - 1
    fig, axes = plt.subplots(1, orders, figsize=(2.6 * orders, 2.5), squeeze=False, layout="constrained")
    log_d = np.log(widths)
    colours = plt.cm.viridis(np.linspace(0.1, 0.85, len(gammas)))
    for m, ax in enumerate(axes[0], start=1):
        for colour, g, ratio in zip(colours, gammas, ratios):
            f = fits[g][m - 1]
            ax.loglog(widths, ratio[:, m], "o", color=colour,
                      label=f"γ = {g:g}: fit {fmt(f.slope, 2)}, predicted {fmt(f.predicted, 2)}")
            if np.isfinite(f.slope):
                centre = log_d.mean()
                ax.loglog(widths, np.exp(f.intercept + f.slope * log_d), "-", color=colour, lw=1.2)
                level = f.intercept + f.slope * centre
                ax.loglog(widths, np.exp(level + f.predicted * (log_d - centre)), "--", color=colour, lw=1, alpha=0.7)
        ax.set_xlabel("width d")
        ax.set_ylabel(f"RMS(order {m}) / RMS(order 0)")
        ax.set_title(f"order {m} (solid: fit, dashed: predicted slope)")
        ax.legend()
    fig.suptitle("Low-order dominance at initialization (SPEC §6.2)")
    return fig

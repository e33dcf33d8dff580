"""Figures of the learning recipes (SPEC §8 F8a, F9, App. D: ``ctxstair.recipes.ffn_vs_attention``,
``modulus_onset``, ``seed_spectra``).

Every function returns a matplotlib Figure built from numbers the caller read off run directories;
the caller writes it with :func:`ctxstair.report.figures.save_figure`.

* :func:`accuracy_and_probe_figure` — training accuracy and the held-out order-1 probe of several
  runs on shared epoch axes (F8a: CBOW vs attention-only).
* :func:`pca_panels_figure` — PCA scatter panels side by side (final embeddings of several runs).
* :func:`similarity_grid` — small multiples of cosine-similarity matrices with one colour bar
  (F9: S^sig,(0) per modulus; App. D: S^emb per seed).
* :func:`onset_figure` — first epoch with training accuracy ≥ 95 % against the modulus M (F9).
* :func:`fourier_profiles_figure` — Fourier alignment over k, one panel per seed (App. D).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter

from ctxstair.analysis import measures as ms
from ctxstair.report.figures import house_style, pca_scatter
from ctxstair.report.run_figures import PALETTE, draw_aggregate

_LOG_EPOCH = "epoch (log axis; epoch 0 not shown)"


@house_style
def accuracy_and_probe_figure(curves: dict[str, list[dict]], chance: float, threshold: float) -> plt.Figure:
    """Two panels on a shared log-epoch axis (epochs ≥ 1): training accuracy of every member of each
    run (top; dotted: chance, dashed: ``threshold``) and its held-out order-1 probe (bottom).
    ``curves`` maps a run's label to one dict per member with (epochs, values) pairs ``acc`` and
    ``probe``. One colour per run; every member is drawn as its own line."""
    fig, (ax_acc, ax_probe) = plt.subplots(2, 1, sharex=True, figsize=(3.6, 4.4), layout="constrained")
    for colour, (label, members) in zip(PALETTE, curves.items()):
        for i, member in enumerate(members):
            for ax, key, style in ((ax_acc, "acc", {}), (ax_probe, "probe", {"marker": "o", "ms": 2.5})):
                epochs, values = member[key]
                keep = epochs >= 1
                ax.plot(epochs[keep], values[keep], color=colour, lw=1.5, label=label if i == 0 else None, **style)
    ax_acc.axhline(chance, color="0.5", ls=":", lw=1.2, label=f"chance = {chance:.3f}")
    ax_acc.axhline(threshold, color="0.2", ls="--", lw=0.9, label=f"{threshold * 100:g} %: learned")
    ax_acc.set_ylim(-0.02, 1.02)
    ax_acc.set_ylabel("training accuracy (fraction)")
    ax_acc.set_title("Accuracy on the whole training set")
    ax_probe.axhline(0.0, color="0.6", lw=0.8, zorder=0)
    ax_probe.set_ylim(-1.05, 1.05)
    ax_probe.set_ylabel("alignment with order 1\n(held-out Pearson r of the probe)")
    ax_probe.set_title("Alignment of $S^{\\mathrm{emb}}(t)$ with the order-1 signature geometry")
    ax_probe.set_xscale("log")
    ax_probe.set_xlabel(_LOG_EPOCH)
    for ax, where in ((ax_acc, "center left"), (ax_probe, "upper left")):
        ax.grid(True, alpha=0.3)
        ax.legend(frameon=False, loc=where)
    fig.suptitle("Learning vs. alignment with order 1: " + " vs. ".join(curves))
    return fig


@house_style
def pca_panels_figure(panels: list[tuple[str, np.ndarray]], tokens: np.ndarray, title: str) -> plt.Figure:
    """One PCA scatter per (panel title, rows (T, ...)) over the same ``tokens``, side by side."""
    fig, axes = plt.subplots(1, len(panels), figsize=(2.4 * len(panels), 2.4), squeeze=False, layout="constrained")
    for ax, (panel_title, M) in zip(axes[0], panels):
        pca_scatter(ax, M, tokens, panel_title)
    fig.suptitle(title)
    return fig


@house_style
def similarity_grid(panels: list[tuple[str, np.ndarray]], tokens: np.ndarray, title: str, ncols: int = 5,
                    per_panel: bool = False) -> plt.Figure:
    """Small multiples of cosine-similarity matrices (T, T) over ``tokens``, ``ncols`` per row, one
    shared colour bar; token-id ticks on every panel, axis labels on the outer ones.

    By default every panel is drawn on [-1, 1] (``RdBu_r``). With ``per_panel`` each panel is
    stretched over its own range [min, max] (``viridis``; the range is appended to its title, and a
    constant matrix is drawn in one colour and titled so) — for matrices whose entries all lie close
    together, such as the cosines of probability vectors."""
    nrows = -(-len(panels) // ncols)
    ncols = min(ncols, len(panels))
    fig, axes = plt.subplots(nrows, ncols, figsize=(1.6 * ncols + 0.8, 1.7 * nrows + 0.6), squeeze=False,
                             layout="constrained")
    step = max(1, len(tokens) // 4)
    ticks = np.arange(0, len(tokens), step)
    image = None
    for i, ax in enumerate(axes.flat):
        if i >= len(panels):
            ax.set_axis_off()
            continue
        panel_title, S = panels[i]
        if per_panel:
            low, high = float(S.min()), float(S.max())
            constant = high - low <= 1e-12 * max(1.0, abs(high))
            image = ax.imshow(np.ones_like(S) if constant else (S - low) / (high - low), cmap="viridis", vmin=0, vmax=1,
                              interpolation="nearest")
            panel_title += f"\nconstant: all {high:.3f}" if constant else f"\ncosine {low:.3f} to {high:.3f}"
        else:
            image = ax.imshow(S, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        ax.set_xticks(ticks, [str(t) for t in tokens[ticks]], fontsize="small")
        ax.set_yticks(ticks, [str(t) for t in tokens[ticks]], fontsize="small")
        ax.set_title(panel_title)
        if i % ncols == 0:
            ax.set_ylabel("token id")
        if i >= len(panels) - ncols:
            ax.set_xlabel("token id")
    label = ("position within the panel's own range\n(0 = its min, 1 = its max; ranges in the titles)" if per_panel
             else "cosine similarity")
    fig.colorbar(image, ax=axes, fraction=0.02, pad=0.01, label=label)
    fig.suptitle(title)
    return fig


@house_style
def onset_figure(rows: list[dict], N: int, cap: int, threshold: float) -> plt.Figure:
    """First epoch with training accuracy ≥ ``threshold`` against the modulus M (F9): one point per
    seed (slightly spread sideways), the median per M as a line (censored runs counted as the cap),
    censored runs (never reached within ``cap`` epochs) as open triangles at the cap, and the moduli
    dividing ``N`` on a shaded background and in a second colour. ``rows`` have ``M``, ``seed``,
    ``onset_epoch`` (None = censored). Log y axis (epochs)."""
    Ms = sorted({r["M"] for r in rows})
    fig, ax = plt.subplots(figsize=(3.6, 3.8), layout="constrained")
    medians = []
    for M in Ms:
        mine = [r for r in rows if r["M"] == M]
        divides = N % M == 0
        colour = PALETTE[1] if divides else PALETTE[0]
        if divides:
            ax.axvspan(M - 0.45, M + 0.45, color=PALETTE[1], alpha=0.10, lw=0)
        offsets = np.linspace(-0.18, 0.18, len(mine)) if len(mine) > 1 else [0.0]
        for dx, r in zip(offsets, mine):
            if r["onset_epoch"] is None:
                ax.scatter(M + dx, cap, marker="^", s=42, facecolors="none", edgecolors=colour, linewidths=1.3,
                           zorder=3)
            else:
                ax.scatter(M + dx, r["onset_epoch"], marker="o" if divides else "s", s=22, color=colour, zorder=3)
        medians.append(np.median([cap if r["onset_epoch"] is None else r["onset_epoch"] for r in mine]))
    ax.plot(Ms, medians, color="0.25", lw=1.2, zorder=2)
    ax.axhline(cap, color="0.5", ls=":", lw=1)
    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")  # epochs as numbers, not 6 × 10^1
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_xticks(Ms[:: -(-len(Ms) // 10)])  # at most about ten labelled moduli: a column is narrow
    ax.set_xlabel("modulus $M$ of $y = (x_1 + x_2)$ mod $M$")
    ax.set_ylabel(f"first epoch with training accuracy ≥ {threshold * 100:g} %\n(log scale)")
    handles = [
        plt.Line2D([], [], color=PALETTE[1], marker="o", ls="none", label=f"$M$ divides $N$ = {N} (shaded)"),
        plt.Line2D([], [], color=PALETTE[0], marker="s", ls="none", label="$M$ does not divide $N$"),
        plt.Line2D([], [], color="0.4", marker="^", markerfacecolor="none", ls="none",
                   label=f"censored: not reached within {cap} epochs"),
        plt.Line2D([], [], color="0.25", lw=1.2, label="median over seeds (censored counted as the cap)"),
    ]
    ax.legend(handles=handles, frameon=False, loc="upper left", bbox_to_anchor=(0.0, -0.16), ncol=1)
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(f"Learning onset against the modulus\n($N$ = {N}, one point per seed)")
    return fig


@house_style
def fourier_profiles_figure(profiles: list[dict], k_min: int, ncols: int = 5) -> plt.Figure:
    """One panel per seed: the Fourier alignment over k (SPEC §3 Fourier view) — Pearson r of
    ``S^emb`` with ``S^sig,(1)(c_k)`` (solid) and the same controlling for ``S^sig,(0)`` (dashed;
    undefined at k = 0) — with k < ``k_min`` shaded (not searched for k*) and k* circled.
    ``profiles`` have ``seed``, ``ks``, ``r``, ``partial``, ``k_star``, ``r_star``."""
    nrows = -(-len(profiles) // ncols)
    ncols = min(ncols, len(profiles))
    fig, axes = plt.subplots(nrows, ncols, figsize=(1.5 * ncols, 1.3 * nrows + 0.6), squeeze=False, sharex=True,
                             sharey=True, layout="constrained")
    for i, ax in enumerate(axes.flat):
        if i >= len(profiles):
            ax.set_axis_off()
            continue
        p = profiles[i]
        ks = np.asarray(p["ks"])
        ax.axvspan(ks.min() - 0.5, k_min - 0.5, color="0.88", lw=0)
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.plot(ks, p["r"], color=PALETTE[0], marker="o", ms=2.5, lw=1.2, label="Pearson r")
        ax.plot(ks, p["partial"], color=PALETTE[2], ls="--", lw=1.1, label="r controlling for $S^{\\mathrm{sig},(0)}$")
        ax.scatter([p["k_star"]], [p["r_star"]], s=60, facecolors="none", edgecolors=PALETTE[1], linewidths=1.6,
                   zorder=3, label="k*")
        ax.set_title(f"seed {p['seed']}: k* = {p['k_star']}, r = {p['r_star']:.2f}")
        ax.grid(True, alpha=0.3)
        if i % ncols == 0:
            ax.set_ylabel("alignment with\n$S^{\\mathrm{sig},(1)}(c_k)$")
        if i >= len(profiles) - ncols:
            ax.set_xlabel("frequency k")
    axes[0][0].legend(frameon=False, loc="upper right")
    fig.suptitle(f"Fourier alignment of each seed's final embeddings over k (grey: k < {k_min}, not searched; "
                 f"circle: k* = argmax of r over k ≥ {k_min})")
    return fig


@house_style
def embedding_modes_figure(paths: dict[str, Path], per_part: dict[str, list[dict]], optimizers: list[str], N: int,
                           modes: dict[str, str], learned_acc: float, early_epochs: int) -> plt.Figure:
    """F8b: training accuracy over epochs per optimizer (one panel each) and embedding mode (one curve
    each, ``modes``: mode -> label), members' mean with a min–max band; ``per_part`` holds each part's
    member rows (``optimizer``, ``mode``, ``lr``, ``epochs_to_95``)."""
    fig, axes = plt.subplots(1, len(optimizers), figsize=(2.8 * len(optimizers), 2.6), squeeze=False, sharey=True,
                             layout="constrained")
    for ax, opt in zip(axes[0], optimizers):
        for j, (mode, label) in enumerate(modes.items()):
            for part, rows in per_part.items():
                if (rows[0]["optimizer"], rows[0]["mode"]) == (opt, mode):
                    curves = [ms.metric_series(paths[part], m, "acc") for m in ms.members(paths[part])]
                    draw_aggregate(ax, curves, f"{label}: {learned_acc:.0%} at epochs {onsets_text(rows)}",
                                    dict(color=PALETTE[j], linestyle=("-", "--", "-.")[j]))
        ax.axhline(learned_acc, color="0.5", lw=0.8, ls=":")
        ax.axvline(early_epochs, color="0.5", lw=0.8, ls=":")
        ax.set_xlabel(f"epoch (dotted: end of 'early', epoch {early_epochs})")
        ax.set_title(f"{opt}, lr {next(r[0]['lr'] for r in per_part.values() if r[0]['optimizer'] == opt):g}")
        ax.legend(loc="lower right")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("training accuracy (fraction of the N² samples)")
    fig.suptitle(f"F8b: CBOW on F_mod (N = {N}) with signature, trainable and random embeddings")
    return fig


def onsets_text(rows: list[dict]) -> str:
    """The members' epochs to 95 % accuracy, comma-separated (``never`` for a member that did not get there)."""
    return ", ".join("never" if r["epochs_to_95"] is None else str(r["epochs_to_95"]) for r in rows)

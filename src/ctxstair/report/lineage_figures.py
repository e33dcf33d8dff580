"""Figures of the lineage recipes (SPEC §9; ``ctxstair.recipes.composite`` and ``reason_memory``).

Every function takes the per-γ dicts that :func:`ctxstair.recipes.composite.composite_part` or
:func:`ctxstair.recipes.reason_memory.reason_part` read off the run directories and returns a matplotlib
Figure; the caller writes it with :func:`ctxstair.report.figures.save_figure`. One colour per γ
(Okabe–Ito), one line per ensemble member (seed).

* :func:`answers_figure` — held-out pair (4, 3): fraction of inferential, symmetric and other answers per γ.
* :func:`composite_training_figure` — training accuracy and the inferential fraction over training.
* :func:`key_pca_figure` — PCA of the key embeddings, one panel per γ.
* :func:`group_loss_figure` — loss of the reasoning and memory samples over training, one panel per γ.
* :func:`anchor_figure` — cosine similarity and PCA of the anchor embeddings, one column per γ.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from ctxstair.alignment import cosine_matrix
from ctxstair.alignment.pca import pca
from ctxstair.report.figures import house_style, pca_scatter, similarity_heatmap
from ctxstair.report.run_figures import PALETTE


def _label(part: dict) -> str:
    return f"γ = {part['gamma']:g}"


@house_style
def answers_figure(parts: list[dict], inferential: str, symmetric: str) -> plt.Figure:
    """Grouped bars over γ: the median over seeds of the fraction of held-out samples given the
    inferential answer, the symmetric answer and any other answer at the end; dots: every seed.
    ``inferential`` and ``symmetric`` name the two answers (e.g. 'x − 10') in the legend."""
    kinds = [("inferential_end", f"inferential ({inferential})"), ("symmetric_end", f"symmetric ({symmetric})"),
             ("other_end", "other")]
    fig, ax = plt.subplots(figsize=(1.0 * len(parts) + 1.8, 2.6), layout="constrained")
    width = 0.8 / len(kinds)
    for j, (key, label) in enumerate(kinds):
        x = np.arange(len(parts)) + (j - (len(kinds) - 1) / 2) * width
        ax.bar(x, [np.median(p[key]) for p in parts], width, color=PALETTE[j], alpha=0.75, label=label)
        for xi, p in zip(x, parts):
            ax.plot(np.full(len(p[key]), xi), p[key], "o", color="black", ms=3.5)
    ax.set_xticks(np.arange(len(parts)), [_label(p) for p in parts])
    ax.set_xlabel("initialization exponent γ (std d_in^-γ; larger γ = smaller initialization)")
    ax.set_ylabel("fraction of held-out samples")
    ax.set_ylim(0, 1.02)
    ax.set_title("Held-out anchor pair (4, 3): which answer does the model give?")
    ax.legend(frameon=False, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    return fig


@house_style
def composite_training_figure(parts: list[dict]) -> plt.Figure:
    """Two panels over epochs: training accuracy of every member (``acc_curves``) and, at every
    snapshot, the inferential (solid) and symmetric (dashed) fraction on the held-out pair."""
    fig, (ax_acc, ax_inf) = plt.subplots(2, 1, sharex=True, figsize=(3.6, 4.2), layout="constrained")
    for colour, p in zip(PALETTE, parts):
        for i, (epochs, acc) in enumerate(p["acc_curves"]):
            ax_acc.plot(epochs, acc, color=colour, lw=1.2, label=_label(p) if i == 0 else None)
        for i, (inf, sym) in enumerate(zip(p["inferential"], p["symmetric"])):
            ax_inf.plot(p["epochs"], inf, color=colour, marker="o", ms=2.5, lw=1.3,
                        label=f"{_label(p)}: inferential" if i == 0 else None)
            ax_inf.plot(p["epochs"], sym, color=colour, ls="--", lw=1.0,
                        label=f"{_label(p)}: symmetric" if i == 0 else None)
    ax_acc.set_ylabel("training accuracy (fraction)")
    ax_acc.set_title("Accuracy on the training samples")
    ax_inf.set_ylabel("fraction of held-out samples")
    ax_inf.set_title("Held-out pair (4, 3): inferential (solid) and symmetric (dashed) answers")
    ax_inf.set_xlabel("epoch")
    for ax in (ax_acc, ax_inf):
        ax.set_ylim(-0.02, 1.02)
        ax.grid(True, alpha=0.3)
        ax.legend(frameon=False, loc="upper left", ncol=2)
    return fig


@house_style
def key_pca_figure(parts: list[dict]) -> plt.Figure:
    """PCA of the key embeddings (``key_rows`` over ``keys``) at the end, one panel per γ."""
    fig, axes = plt.subplots(1, len(parts), figsize=(2.4 * len(parts), 2.4), layout="constrained", squeeze=False)
    for ax, p in zip(axes[0], parts):
        pca_scatter(ax, p["key_rows"], np.asarray(p["keys"]),
                    f"{_label(p)}: key embeddings\n(|Spearman| of PC1 with the key: {p['key_order'][0]:.2f})")
    fig.suptitle("PCA of the key embeddings at the end of training (colour: key value)")
    return fig


@house_style
def group_loss_figure(parts: list[dict]) -> plt.Figure:
    """One panel per γ: mean training loss of the reasoning (solid) and memory (dashed) samples at every
    snapshot, one line per member; dotted on a second axis: accuracy on the held-out reasoning pairs."""
    fig, axes = plt.subplots(1, len(parts), figsize=(2.4 * len(parts), 2.4), layout="constrained", squeeze=False,
                             sharey=True)
    for ax, p in zip(axes[0], parts):
        held_ax = ax.twinx()
        for i, (lr, lm, h) in enumerate(zip(p["loss_reasoning"], p["loss_memory"], p["heldout"])):
            ax.plot(p["epochs"], lr, color=PALETTE[0], lw=1.4, label="reasoning samples" if i == 0 else None)
            ax.plot(p["epochs"], lm, color=PALETTE[1], ls="--", lw=1.4, label="memory samples" if i == 0 else None)
            held_ax.plot(p["epochs"], h, color=PALETTE[2], ls=":", lw=1.2,
                         label="held-out reasoning pairs (accuracy)" if i == 0 else None)
        held_ax.set_ylim(-0.02, 1.02)
        held_ax.set_ylabel("held-out accuracy (fraction)", color=PALETTE[2])
        ax.set_xlabel("epoch")
        ax.set_title(f"{_label(p)}: loss halves at epoch {_first(p['half_reasoning'])} (reasoning), "
                     f"{_first(p['half_memory'])} (memory)")
        ax.grid(True, alpha=0.3)
        lines = ax.get_legend_handles_labels()
        held_lines = held_ax.get_legend_handles_labels()
        ax.legend(lines[0] + held_lines[0], lines[1] + held_lines[1], frameon=False, loc="center right")
    axes[0][0].set_ylabel("mean cross-entropy on the training samples (nats)")
    fig.suptitle("Which group is learned first: loss of the reasoning and the memory samples")
    return fig


def _first(values: list[int | None]) -> str:
    """Member 0's halving epoch ('never' for None)."""
    return "never" if values[0] is None else str(values[0])


@house_style
def anchor_figure(parts: list[dict]) -> plt.Figure:
    """One column per γ: cosine similarity of the anchor embeddings (``anchor_rows`` over ``anchors``,
    memory then reasoning) and their PCA (memory anchors as grey squares, reasoning anchors as circles
    coloured by value)."""
    fig, axes = plt.subplots(2, len(parts), figsize=(2.4 * len(parts), 4.8), layout="constrained", squeeze=False)
    for col, p in enumerate(parts):
        anchors, rows = np.asarray(p["anchors"]), np.asarray(p["anchor_rows"])
        similarity_heatmap(axes[0][col], cosine_matrix(rows), anchors, f"{_label(p)}: cosine of anchor embeddings")
        ax = axes[1][col]
        coords, explained = pca(rows, 2)
        is_reasoning = np.isin(anchors, p["reasoning"])
        ax.scatter(coords[~is_reasoning, 0], coords[~is_reasoning, 1], marker="s", color="0.55", s=30,
                   label="memory anchors")
        points = ax.scatter(coords[is_reasoning, 0], coords[is_reasoning, 1], c=anchors[is_reasoning], cmap="viridis",
                            s=34, edgecolors="k", linewidths=0.3, label="reasoning anchors")
        for (x, y), token in zip(coords, anchors):
            ax.annotate(str(token), (x, y), fontsize="small", xytext=(2, 2), textcoords="offset points")
        fig.colorbar(points, ax=ax, fraction=0.046, pad=0.04, label="reasoning anchor value")
        ax.set_xlabel(f"PC1 ({100 * explained[0]:.0f}% of variance)")
        ax.set_ylabel(f"PC2 ({100 * explained[1]:.0f}% of variance)")
        ax.set_title(f"{_label(p)}: PCA of the anchor embeddings")
        ax.legend(frameon=False)
    fig.suptitle("Anchor embeddings at the end of training (member 0)")
    return fig

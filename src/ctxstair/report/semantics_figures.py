"""PCA pictures of word groups in next-token signatures (SPEC §7): ordered and cyclic groups with
their words joined in order, categories coloured (:func:`ctxstair.lm.semantics.group_structure`)."""

from __future__ import annotations

import math

import numpy as np

from ctxstair.errors import InputError
from ctxstair.lm.semantics import format_score
from ctxstair.report.figures import plt  # sets the non-interactive backend


def semantics_figure(result: dict, title: str):
    """PCA pictures of :func:`group_structure`'s result: one panel per ordered / cyclic group
    with its words joined in listed order (closed for cycles), and one with all category words
    coloured by category; axes give the explained variance. Returns a matplotlib Figure."""
    panels = [(name, e) for name, e in result["groups"].items() if e["kind"] != "category" and "pca" in e]
    if "pca" in result["categories"]:
        panels.append(("categories", result["categories"]))
    if not panels:
        raise InputError("no group has 3 or more words in the corpus: nothing to draw")
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 4.2 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    for ax, (name, entry) in zip(axes.flat, panels):
        coords = np.asarray(entry["pca"])
        if name == "categories":
            labels = np.array(entry["labels"])
            for group in dict.fromkeys(entry["labels"]):
                ax.scatter(*coords[labels == group].T, s=26, label=group, edgecolors="k", linewidths=0.3)
            ax.legend(fontsize=7, loc="best")
            score = f"silhouette = {format_score(entry['silhouette'])}"
        else:
            path = np.vstack([coords, coords[:1]]) if entry["kind"] == "cyclic" else coords
            ax.plot(*path.T, color="0.6", lw=0.8, zorder=1)
            ax.scatter(*coords.T, c=np.arange(len(coords)), cmap="viridis", s=30, edgecolors="k",
                       linewidths=0.3, zorder=2)
            score = f"{entry['measure']} = {format_score(entry['value'])}"
        for (x, y), word in zip(coords, entry["words"]):
            ax.annotate(word, (x, y), fontsize=7, xytext=(2, 2), textcoords="offset points")
        ax.set_xlabel(f"PC1 ({100 * entry['explained'][0]:.0f}% of variance)")
        ax.set_ylabel(f"PC2 ({100 * entry['explained'][1]:.0f}% of variance)")
        ax.set_title(f"{name}: {score}", fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig

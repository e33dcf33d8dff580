"""Pictures of word-group structure (SPEC §7, "Corpus semantics"; :mod:`ctxstair.semantics.structure`):
PCA panels of the groups' vectors (next-token signatures or a model's input embeddings) and a
chart of every group's score against chance with its 95 % interval, signatures and embeddings side
by side."""

from __future__ import annotations

import math

import numpy as np

from ctxstair.errors import InputError
from ctxstair.report.figures import house_style, plt  # sets the non-interactive backend
from ctxstair.semantics.scores import GROUP_MEASURES
from ctxstair.semantics.summary import format_score


@house_style
def semantics_figure(result: dict, title: str):
    """PCA pictures of :func:`~ctxstair.semantics.structure.group_structure`'s (or
    :func:`~ctxstair.semantics.structure.embedding_structure`'s) result: one panel per ordered / cyclic
    group with its words joined in listed order (closed for cycles), and one with all category
    words coloured by category; axes give the explained variance, titles the score, its chance
    level and interval. Returns a matplotlib Figure."""
    panels = [(name, e) for name, e in result["groups"].items() if e["kind"] != "category" and "pca" in e]
    if "pca" in result["categories"]:
        panels.append(("categories", result["categories"]))
    if not panels:
        raise InputError("no group has 3 or more words in the corpus: nothing to draw")
    columns = min(3, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(2.5 * columns, 2.5 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    for ax, (name, entry) in zip(axes.flat, panels):
        coords = np.asarray(entry["pca"])
        if name == "categories":
            labels = np.array(entry["labels"])
            for group in dict.fromkeys(entry["labels"]):
                ax.scatter(*coords[labels == group].T, s=26, label=group, edgecolors="k", linewidths=0.3)
            ax.legend(loc="best")
            score = f"silhouette = {format_score(entry['value'])}"
        else:
            path = np.vstack([coords, coords[:1]]) if entry["kind"] == "cyclic" else coords
            ax.plot(*path.T, color="0.6", lw=0.8, zorder=1)
            ax.scatter(*coords.T, c=np.arange(len(coords)), cmap="viridis", s=30, edgecolors="k",
                       linewidths=0.3, zorder=2)
            score = f"{entry['measure']} = {format_score(entry['value'])}"
        for (x, y), word in zip(coords, entry["words"]):
            ax.annotate(word, (x, y), fontsize="small", xytext=(2, 2), textcoords="offset points")
        ax.set_xlabel(f"PC1 ({100 * entry['explained'][0]:.0f}% of variance)")
        ax.set_ylabel(f"PC2 ({100 * entry['explained'][1]:.0f}% of variance)")
        ax.set_title(f"{name}: {score}\n{_uncertainty(entry)}")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _uncertainty(entry: dict) -> str:
    parts = []
    if entry.get("chance") is not None:
        parts.append(f"chance {entry['chance']:.2f}, p = {entry['p_value']:.3f}")
    if entry.get("ci"):
        parts.append(f"95% CI [{entry['ci'][0]:.2f}, {entry['ci'][1]:.2f}]")
    elif entry.get("leave_one_out"):
        parts.append(f"one word out [{entry['leave_one_out'][0]:.2f}, {entry['leave_one_out'][1]:.2f}]")
    return ", ".join(parts)


@house_style
def scores_figure(result: dict, title: str, embeddings: dict | None = None):
    """Every group's score (and all categories together) with its chance level: signatures with
    their 95 % bootstrap interval, and, if given, the embeddings with their leave-one-word-out
    range, side by side on one row per group. Undefined scores are left out. Returns a Figure."""
    names = [*result["groups"], "categories"]
    sources = [("signatures", result, "tab:blue", "95% bootstrap CI")]
    if embeddings is not None:
        sources.append(("embeddings", embeddings, "tab:orange", "leave-one-word-out range"))
    fig, ax = plt.subplots(figsize=(3.6, 0.22 * len(names) * len(sources) + 1.4))
    offsets = np.linspace(-0.18, 0.18, len(sources)) if len(sources) > 1 else [0.0]
    chance_label = "chance (permutation mean)"
    for (source, res, colour, interval), offset in zip(sources, offsets):
        label = source
        for row, name in enumerate(names):
            entry = res["categories"] if name == "categories" else res["groups"][name]
            if entry.get("value") is None:
                continue
            y = row + offset
            bounds = entry.get("ci") or entry.get("leave_one_out")
            if bounds:
                ax.plot(bounds, [y, y], color=colour, lw=2, alpha=0.6)
            ax.plot([entry["value"]], [y], "o", color=colour, label=label)
            label = None
            if entry.get("chance") is not None:
                ax.plot([entry["chance"]], [y], "|", color="k", markersize=12, mew=2, label=chance_label)
                chance_label = None
        ax.plot([], [], color=colour, lw=2, alpha=0.6, label=f"{source}: {interval}")
    ax.set_yticks(range(len(names)))
    measures = [GROUP_MEASURES["category"] if name == "categories" else result["groups"][name]["measure"]
                for name in names]
    ax.set_yticklabels([f"{name}\n{measure}" for name, measure in zip(names, measures)])
    ax.invert_yaxis()
    ax.axvline(0, color="0.8", lw=0.8, zorder=0)
    ax.set_xlabel("score (the group's measure; 1 = structure recovered)")
    ax.set_ylabel("word group")
    ax.set_title(title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    fig.tight_layout()
    return fig

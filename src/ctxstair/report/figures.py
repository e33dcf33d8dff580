"""Publication-style figures: similarity heatmaps and PCA scatter plots of per-token geometry.

Every function draws on a given matplotlib Axes and labels it fully (axes, colour bar, title), so
recipes can compose panels; :func:`save_figure` writes a figure atomically as PNG.
"""

from __future__ import annotations

import io
import os

import matplotlib.pyplot as plt
import numpy as np

from ctxstair.alignment.pca import pca
from ctxstair.io import atomic_write_bytes


def similarity_heatmap(ax: plt.Axes, S: np.ndarray, token_ids: np.ndarray, title: str) -> None:
    """Heatmap of a cosine-similarity matrix S (n, n) (SPEC §3) over tokens ``token_ids`` (n,), colour range [-1, 1]."""
    image = ax.imshow(S, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    step = max(1, len(token_ids) // 10)
    ticks = np.arange(0, len(token_ids), step)
    ax.set_xticks(ticks, [str(t) for t in np.asarray(token_ids)[ticks]])
    ax.set_yticks(ticks, [str(t) for t in np.asarray(token_ids)[ticks]])
    ax.set_xlabel("token id")
    ax.set_ylabel("token id")
    ax.set_title(title, fontsize=10)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="cosine similarity")


def pca_scatter(ax: plt.Axes, M: np.ndarray, token_ids: np.ndarray, title: str) -> None:
    """Scatter of the rows of M (n, ...) on their first two principal components (SPEC §3), each point labelled
    with its token id and coloured by its position in ``token_ids`` (numeric order for numbers)."""
    flat = np.asarray(M, dtype=np.float64).reshape(len(token_ids), -1)
    if np.ptp(flat, axis=0).max() <= 1e-12 * np.abs(flat).max():
        # Identical rows (e.g. every order-0 signature of `mod`): there is no variance to project.
        ax.text(0.5, 0.5, "all rows identical:\nno variance to project", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(title, fontsize=10)
        return
    coords, explained = pca(M, 2)
    colours = np.linspace(0, 1, len(token_ids))
    ax.scatter(coords[:, 0], coords[:, 1], c=colours, cmap="viridis", s=28, edgecolors="k", linewidths=0.3)
    for (px, py), token in zip(coords, token_ids):
        ax.annotate(str(token), (px, py), fontsize=7, xytext=(2, 2), textcoords="offset points")
    ax.set_xlabel(f"PC1 ({100 * explained[0]:.0f}% of variance)")
    ax.set_ylabel(f"PC2 ({100 * explained[1]:.0f}% of variance)")
    ax.set_title(title, fontsize=10)


def save_figure(fig: plt.Figure, path: str | os.PathLike, dpi: int = 130) -> None:
    """Write ``fig`` as PNG to ``path`` atomically and close it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())

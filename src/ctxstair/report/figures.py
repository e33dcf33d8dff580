"""Publication-style figures: similarity heatmaps and PCA scatter plots of per-token geometry.

Every function draws on a given matplotlib Axes and labels it fully (axes, colour bar, title), so
recipes can compose panels. The house style of every figure (:data:`STYLE`: every function that makes a
figure is decorated with :func:`house_style`) and the one writer of figure files (:func:`save_figure`:
PNG, and the vector copy of ``--figure-format`` beside it) are here; docs/design.md ("Figures") says why.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np

from ctxstair.alignment.pca import pca
from ctxstair.errors import InputError
from ctxstair.io import atomic_write_bytes, remove_output

Drawn = TypeVar("Drawn")

#: What ``--figure-format`` accepts. Every figure is written as PNG, which report.html embeds; ``svg``
#: or ``pdf`` adds a vector copy of the same figure beside it (``figures/rho_next.svg`` next to
#: ``figures/rho_next.png``); ``png`` writes the PNG alone.
FIGURE_FORMATS = ("png", "svg", "pdf")
DEFAULT_FIGURE_FORMAT = "svg"
#: Resolution of the PNG: sharp on a screen and in print at the figures' sizes.
PNG_DPI = 200

#: The house style, in one place. Figures are drawn at their printed size — a single panel about one
#: column wide (3.3–3.6 in), a figure of several panels about two columns (≈ 7 in) — so these point
#: sizes are the sizes on the page. Axes leave a margin so that no marker at the data's edge is cut;
#: ``svg.hashsalt`` fixes the SVG's element ids, so that a figure's vector file is byte-identical from
#: run to run (the dates are left out by :func:`save_figure`).
STYLE = {
    "font.size": 8, "axes.titlesize": 8, "axes.labelsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7,
    "legend.fontsize": 7, "figure.titlesize": 9, "figure.dpi": 100, "savefig.dpi": PNG_DPI,
    "lines.linewidth": 1.2, "lines.markersize": 3, "axes.linewidth": 0.6, "grid.linewidth": 0.5,
    "axes.xmargin": 0.04, "axes.ymargin": 0.06, "legend.frameon": False, "mathtext.fontset": "dejavusans",
    "svg.hashsalt": "ctxstair", "pdf.fonttype": 42, "image.interpolation": "nearest",
}


@contextlib.contextmanager
def figure_style():
    """Draw figures in the house style (:data:`STYLE`) inside the block; matplotlib's settings are
    restored after it, so a notebook or a training loop that imports ctxstair keeps its own."""
    with plt.rc_context(STYLE):
        yield


def house_style(draw: Callable[..., Drawn]) -> Callable[..., Drawn]:
    """Decorate a function that draws a figure so that it draws in :data:`STYLE`, whoever calls it (the
    point sizes are fixed when the text is made, so the style must hold while the figure is drawn)."""
    @functools.wraps(draw)
    def styled(*args, **kwargs):
        with figure_style():
            return draw(*args, **kwargs)
    return styled


def check_figure_format(figure_format: str) -> str:
    """``figure_format`` when it is one of :data:`FIGURE_FORMATS`; InputError naming them otherwise."""
    if figure_format not in FIGURE_FORMATS:
        raise InputError(f"unknown figure format {figure_format!r}: use one of {', '.join(FIGURE_FORMATS)}")
    return figure_format


def similarity_heatmap(ax: plt.Axes, S: np.ndarray, token_ids: np.ndarray, title: str,
                       colorbar: bool = True) -> matplotlib.image.AxesImage:
    """Heatmap of a cosine-similarity matrix S (n, n) (SPEC §3) over tokens ``token_ids`` (n,), colour range
    [-1, 1], with its colour bar unless ``colorbar`` is false (a row of heatmaps shares one); returns the image."""
    image = ax.imshow(S, cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    step = max(1, len(token_ids) // 5)
    ticks = np.arange(0, len(token_ids), step)
    ax.set_xticks(ticks, [str(t) for t in np.asarray(token_ids)[ticks]])
    ax.set_yticks(ticks, [str(t) for t in np.asarray(token_ids)[ticks]])
    ax.set_xlabel("token id")
    ax.set_ylabel("token id")
    ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="cosine similarity")
    return image


def pca_scatter(ax: plt.Axes, M: np.ndarray, token_ids: np.ndarray, title: str) -> None:
    """Scatter of the rows of M (n, ...) on their first two principal components (SPEC §3), each point coloured
    by its position in ``token_ids`` (numeric order for numbers) and at most 12 evenly spaced points labelled
    with their token id."""
    flat = np.asarray(M, dtype=np.float64).reshape(len(token_ids), -1)
    if np.ptp(flat, axis=0).max() <= 1e-12 * np.abs(flat).max():
        # Identical rows (e.g. every order-0 signature of `mod`): there is no variance to project.
        ax.text(0.5, 0.5, "all rows identical:\nno variance to project", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(title)
        return
    coords, explained = pca(M, 2)
    colours = np.linspace(0, 1, len(token_ids))
    ax.scatter(coords[:, 0], coords[:, 1], c=colours, cmap="viridis", s=12, edgecolors="k", linewidths=0.3)
    step = -(-len(token_ids) // 12)  # at most 12 labels, so that they stay readable in a small panel
    for (px, py), token in list(zip(coords, token_ids))[::step]:
        ax.annotate(str(token), (px, py), fontsize="small", xytext=(2, 2), textcoords="offset points")
    ax.set_xlabel(f"PC1 ({100 * explained[0]:.0f}% var.)")
    ax.set_ylabel(f"PC2 ({100 * explained[1]:.0f}% var.)")
    ax.set_title(title)


#: Metadata that would make two drawings of one figure differ (matplotlib writes dates by default).
_NO_DATES = {"png": {}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}


def save_figure(fig: plt.Figure, path: str | os.PathLike,
                figure_format: str = DEFAULT_FIGURE_FORMAT) -> list[Path]:
    """Write ``fig`` to ``path`` (a ``.png``) and, for ``figure_format`` ``svg`` or ``pdf``, to the same
    name with that suffix beside it; close the figure and return the files written. Each file is written
    atomically and holds no date, so the same figure gives the same bytes. A vector copy of another
    format left there by an earlier drawing is removed, so the files beside a PNG are of one format."""
    path = Path(path)
    formats = ["png"] + ([] if check_figure_format(figure_format) == "png" else [figure_format])
    for stale in set(FIGURE_FORMATS) - set(formats):
        remove_output(path.with_suffix(f".{stale}"))  # and from the output's record
    written = []
    for kind in formats:
        buffer = io.BytesIO()
        with figure_style():  # the SVG's ids come from the style's hash salt
            fig.savefig(buffer, format=kind, dpi=PNG_DPI, bbox_inches="tight", pad_inches=0.03,
                        metadata=_NO_DATES[kind])
        written.append(path if kind == "png" else path.with_suffix(f".{kind}"))
        atomic_write_bytes(written[-1], buffer.getvalue())
    plt.close(fig)
    return written

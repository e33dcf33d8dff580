"""Figures of one training run, read from its run directory (``docs/run-directory.md``; SPEC §3, §8).

Every public function takes the run directory and returns a matplotlib Figure; the caller writes it
with :func:`ctxstair.report.figures.save_figure`. Nothing is recomputed that the run directory
already holds: alignment curves come from ``alignment.csv``, losses from ``metrics.jsonl``,
embeddings from ``snapshots/``, signatures from ``signatures.npz``.

* :func:`staircase_figure` — the staircase plot (SPEC §8 F1, F3): alignment with each signature
  order over training, above loss and accuracy.
* :func:`fourier_heatmap` — ``ρ_(1),k`` over (snapshot epoch, k) (SPEC §3 "Fourier view", F3).
* :func:`geometry_figure` — ``S^emb`` at chosen epochs next to ``S^sig,(0)`` and ``S^sig,(1)``
  through ``c_{P/2}`` (F1, F2b).
* :func:`pca_figure` — PCA of the embeddings at chosen epochs next to PCA of the signatures (F2b).
* :func:`curves_figure` — loss and accuracy of every ensemble member.

Conventions:

* **Epoch 0 on log axes.** Epoch 0 (the initialization) has no place on a logarithmic axis. The
  curve figures use a true log-epoch axis and plot epochs ``>= 1`` only; epoch 0 is dropped, and
  the x label says so. (A symlog axis would keep it, but it squeezes epochs 0..1 into a linear
  stretch that looks like a feature of the data.) The Fourier heatmap has one column per snapshot
  and does show epoch 0.
* **Ensembles.** Where a figure shows "all members", each curve is the mean over members at each
  epoch (NaN-aware: a member without a value at an epoch is left out there) with a shaded band
  from the minimum to the maximum over members. Pass ``member=i`` to see one member.
* **Colours.** Lines use the Okabe–Ito palette, also told apart by line style and marker;
  heatmaps use the diverging ``RdBu_r`` map on ``[-1, 1]``; both are colour-blind safe.
"""

from __future__ import annotations

import os
import re
import textwrap
import warnings
from pathlib import Path

import matplotlib.patches
import matplotlib.pyplot as plt
import numpy as np

from ctxstair import rundir
from ctxstair.alignment import compare, cosine_matrix, signature_cosine
from ctxstair.errors import InputError
from ctxstair.report.figures import house_style, pca_scatter, similarity_heatmap
from ctxstair.report.signatures import signature_views
from ctxstair.signatures.hierarchy import SignatureHierarchy

__all__ = ["curves_figure", "fourier_heatmap", "geometry_figure", "pca_figure", "staircase_figure"]

#: Okabe–Ito colour-blind-safe palette (without yellow, which is too light on white).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
_FOURIER = re.compile(r"^fourier_k(\d+)$")
_LOG_EPOCH_LABEL = "epoch (log axis; epoch 0 not shown)"


# ----------------------------------------------------------------------------------------------
# Public figures
# ----------------------------------------------------------------------------------------------


@house_style
def staircase_figure(run_dir: str | os.PathLike, member: int | None = None) -> plt.Figure:
    """The staircase plot (SPEC §3 alignment; §8 F1, F3): alignment of ``S^emb(t)`` with each
    signature order over training, above training loss and accuracy, on a shared log-epoch axis.

    Top panel, from ``alignment.csv`` (every series that the file holds is drawn):

    * ``order0`` — Pearson ``ρ_(0)`` with ``S^sig,(0)``. If the series is undefined at every drawn
      snapshot (all order-0 signatures equal, e.g. ``mod``), ``one_minus_mse`` is drawn instead and
      labelled "order 0: 1 − MSE (correlation undefined: all order-0 signatures equal)" (on two lines);
    * ``order1_probe`` and ``order1_probe_zero_mean`` — held-out Pearson of the order-1 probe, and
      of the probe restricted to ``v ⟂ 1`` (what order 1 adds beyond order 0);
    * ``fourier_k<kmax>`` — Pearson through the cosine probe ``c_k`` with the largest ``k`` present
      (``k = P/2``, the odd/even direction of ``add``).

    Bottom panel, from ``metrics.jsonl``: training loss (left axis) and accuracy (right axis, 0..1).

    Args:
        run_dir: a run directory.
        member: ensemble member to draw; ``None`` draws the only member, or, for several, the mean
            over members with a shaded min–max band.

    Returns:
        Figure with two axes (alignment, loss) sharing a log x axis (epochs >= 1 only; epoch 0 cannot
        be placed on a log axis) plus the accuracy twin axis.

    Raises:
        InputError: ``alignment.csv`` or ``metrics.jsonl`` missing, or ``member`` not in the run.
    """
    table = rundir.read_alignment(run_dir)
    metrics = rundir.read_metrics(run_dir)
    members = _select_members(np.unique(table["member"]), member, "alignment.csv")
    several = len(members) > 1

    fig, (ax_top, ax_bottom) = plt.subplots(
        2, 1, sharex=True, figsize=(3.6, 4.8), layout="constrained", height_ratios=(3, 2)
    )
    _alignment_panel(ax_top, table, members, run_dir)
    _training_panel(ax_bottom, metrics, _select_members(np.unique(metrics["member"]), member, "metrics.jsonl"))
    fig.suptitle(_who("Context staircase: alignment of $S^{\\mathrm{emb}}(t)$ with\neach signature order (top); "
                      "training loss and accuracy (bottom)", members, several))
    return fig


@house_style
def fourier_heatmap(run_dir: str | os.PathLike, member: int = 0) -> plt.Figure:
    """Heatmap of the Fourier alignment ``ρ_(1),k`` (SPEC §3 "Fourier view"; §8 F3) of one member.

    Reads the ``fourier_k<k>`` rows of ``alignment.csv``: Pearson correlation of ``S^emb(t)`` with
    the cosine matrix of ``h_{α,k} = φ^{y;1}_α c_k``. One column per snapshot (epoch 0 included),
    labelled with its epoch; snapshot epochs are log-spaced then regular, so the x axis is the
    snapshot index, not linear time. One row per ``k`` (increasing upwards). Undefined correlations
    (e.g. ``k = 0`` when all order-0 signatures are equal) are NaN and shown blank over a light
    hatching (plain white would read as r ≈ 0 in the diverging colour map).

    Args:
        run_dir: a run directory.
        member: ensemble member.

    Returns:
        Figure with one image axes (array (n_k, n_snapshots), colour range [-1, 1]) and a colour bar.
    """
    table = rundir.read_alignment(run_dir)
    _select_members(np.unique(table["member"]), member, "alignment.csv")
    ks = _fourier_ks(table)
    if not ks:
        raise InputError(f"alignment.csv in {Path(run_dir)} has no fourier_k<k> rows")
    rows = (table["member"] == member) & np.char.startswith(table["signature"], "fourier_k")
    epochs = np.unique(table["epoch"][rows])
    grid = np.full((len(ks), len(epochs)), np.nan)
    for i, k in enumerate(ks):
        ep, values = rundir.alignment_series(table, f"fourier_k{k}", member, "pearson")
        grid[i, np.searchsorted(epochs, ep)] = values

    width = max(3.6, min(7.2, 1.8 + 0.07 * len(epochs)))
    height = max(2.4, min(5.0, 1.2 + 0.12 * len(ks)))
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    # Undefined cells are left blank (transparent) over a light hatching, so that they cannot be
    # mistaken for r ≈ 0, which RdBu_r also draws near-white.
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad=(0, 0, 0, 0))
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-1, vmax=1, aspect="auto", origin="lower",
                      interpolation="nearest")
    ax.add_patch(matplotlib.patches.Rectangle((-0.5, -0.5), len(epochs), len(ks), facecolor="white",
                                              edgecolor="0.75", hatch="///", linewidth=0, zorder=-1))
    xticks = _spread(len(epochs), 9)
    ax.set_xticks(xticks, [str(e) for e in epochs[xticks]])
    yticks = np.arange(0, len(ks), -(-len(ks) // 12))  # a regular step in k, at most 12 ticks
    ax.set_yticks(yticks, [str(ks[i]) for i in yticks])
    ax.set_xlabel("epoch (one column per snapshot)")
    ax.set_ylabel("frequency k of the context probe $c_k$")
    ax.set_title(f"Member {member}: alignment of $S^{{\\mathrm{{emb}}}}(t)$ with order 1 through $c_k$\n"
                 "(hatched blank: undefined)")
    fig.colorbar(image, ax=ax, label="Pearson r with $S^{\\mathrm{sig},(1)}(c_k)$")
    return fig


@house_style
def geometry_figure(run_dir: str | os.PathLike, epochs, member: int = 0) -> plt.Figure:
    """Row of cosine-similarity heatmaps (SPEC §3; §8 F1, F2b): ``S^emb`` of the task tokens at each
    of ``epochs``, then ``S^sig,(0)`` and ``S^sig,(1)`` through the Fourier probe ``c_{P/2}``.

    ``S^emb`` is the cosine matrix of ``W_E[member, tokens]`` (T, d) from the snapshot, with ``tokens``
    from ``signatures.npz``. Each embedding panel's title gives the epoch and the order-0 alignment
    of that snapshot: Pearson ``ρ_(0)`` from ``alignment.csv`` (computed from the snapshot when the
    file has no such row), or ``1 − MSE`` where the correlation is undefined.

    Args:
        run_dir: a run directory.
        epochs: snapshot epochs to show (each must have a snapshot).
        member: ensemble member.

    Returns:
        Figure with ``len(epochs) + 2`` heatmaps (``+ 1`` if ``signatures.npz`` holds order 0 only),
        each (T, T) on [-1, 1] with a colour bar.
    """
    sigs = rundir.read_signatures(run_dir)
    epochs = _check_epochs(epochs)
    views = _signature_panels(sigs)
    n = len(epochs) + len(views)
    fig, axes = plt.subplots(1, n, figsize=(1.75 * n + 0.5, 2.3), squeeze=False, layout="constrained")
    for ax, epoch in zip(axes[0], epochs):
        emb = _embeddings(run_dir, epoch, member, sigs.tokens)
        score = _order0_score(run_dir, member, epoch, emb, sigs)
        similarity_heatmap(ax, cosine_matrix(emb), sigs.tokens, f"$S^{{\\mathrm{{emb}}}}$ at epoch {epoch}\n{score}",
                           colorbar=False)
    for ax, (title, M) in zip(axes[0][len(epochs):], views):
        image = similarity_heatmap(ax, signature_cosine(M), sigs.tokens, title, colorbar=False)
    fig.colorbar(image, ax=axes[0], fraction=0.03, pad=0.01, label="cosine similarity")  # one range: [-1, 1]
    fig.suptitle(f"Member {member}: embedding geometry of the task tokens vs. signature geometry")
    return fig


@house_style
def pca_figure(run_dir: str | os.PathLike, epochs, member: int = 0) -> plt.Figure:
    """PCA of the task-token embeddings at each of ``epochs`` next to PCA of the order-0 signatures and
    of order 1 through ``c_{P/2}`` (SPEC §3 "PCA of both spaces side by side"; §8 F2b).

    Each panel projects its (T, ...) rows on their first two principal components (centred; sign
    fixed as in :func:`ctxstair.alignment.pca`); points are labelled by token id and coloured by
    their order in ``tokens``.

    Args:
        run_dir: a run directory.
        epochs: snapshot epochs to show.
        member: ensemble member.

    Returns:
        Figure with ``len(epochs) + 2`` scatter panels (``+ 1`` with order 0 only).
    """
    sigs = rundir.read_signatures(run_dir)
    epochs = _check_epochs(epochs)
    views = _signature_panels(sigs)
    n = len(epochs) + len(views)
    fig, axes = plt.subplots(1, n, figsize=(1.8 * n, 2.2), squeeze=False, layout="constrained")
    for ax, epoch in zip(axes[0], epochs):
        pca_scatter(ax, _embeddings(run_dir, epoch, member, sigs.tokens), sigs.tokens, f"embeddings at epoch {epoch}")
    for ax, (title, M) in zip(axes[0][len(epochs):], views):
        pca_scatter(ax, M, sigs.tokens, title)
    fig.suptitle(f"Member {member}: task tokens on their first two principal components,\nembeddings vs. signatures")
    return fig


@house_style
def curves_figure(run_dir: str | os.PathLike) -> plt.Figure:
    """Training loss and accuracy of every ensemble member over epochs (``metrics.jsonl``).

    Two panels side by side, shared log-epoch x axis (epochs >= 1; epoch 0 is not shown): loss
    (cross-entropy over the whole training set) and accuracy (0..1). One line per member.

    Returns:
        Figure with two axes.
    """
    metrics = rundir.read_metrics(run_dir)
    members = [int(m) for m in np.unique(metrics["member"])]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, sharex=True, figsize=(7.0, 2.6), layout="constrained")
    cmap = plt.get_cmap("viridis")
    for i, m in enumerate(members):
        colour = PALETTE[i] if len(members) <= len(PALETTE) else cmap(i / max(1, len(members) - 1))
        style = dict(color=colour, linewidth=1.4, linestyle=("-", "--", "-.", ":")[i % 4], label=f"member {m}")
        for ax, column in ((ax_loss, "loss"), (ax_acc, "acc")):
            x, y = _metric_series(metrics, m, column)
            keep = x >= 1
            ax.plot(x[keep], y[keep], **style)
    for ax in (ax_loss, ax_acc):
        ax.set_xscale("log")
        ax.set_xlabel(_LOG_EPOCH_LABEL)
        ax.grid(True, which="major", alpha=0.3)
    ax_loss.set_ylim(bottom=0)
    ax_loss.set_ylabel("training loss (cross-entropy, nats)")
    ax_loss.set_title("Loss on the whole training set")
    ax_acc.set_ylim(-0.02, 1.02)
    ax_acc.set_ylabel("training accuracy (fraction)")
    ax_acc.set_title("Accuracy on the whole training set")
    ax_acc.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, frameon=False)
    fig.suptitle(f"Training curves of {len(members)} ensemble member{'s' if len(members) > 1 else ''}")
    return fig


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def _select_members(available: np.ndarray, member: int | None, source: str) -> list[int]:
    """Members to draw: ``[member]`` (checked against ``available``), or all of them for ``None``."""
    available = [int(m) for m in available]
    if member is None:
        if not available:
            raise InputError(f"{source} has no rows")
        return available
    if isinstance(member, bool) or not isinstance(member, (int, np.integer)) or int(member) not in available:
        raise InputError(f"member must be one of {available} (members in {source}), got {member!r}")
    return [int(member)]


def _fourier_ks(table: dict) -> list[int]:
    """Sorted frequencies k of the ``fourier_k<k>`` signatures present in an alignment table."""
    return sorted({int(match.group(1)) for s in np.unique(table["signature"]) if (match := _FOURIER.match(s))})


def _metric_series(metrics: dict, member: int, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(epochs, values) of one member's ``loss`` or ``acc`` from ``read_metrics``, sorted by epoch."""
    keep = metrics["member"] == member
    order = np.argsort(metrics["epoch"][keep], kind="stable")
    return metrics["epoch"][keep][order], metrics[column][keep][order]


def draw_aggregate(ax: plt.Axes, curves: list[tuple[np.ndarray, np.ndarray]], label: str, style: dict):
    """Plot one curve (epochs >= 1) or, for several, their mean with a min–max band; return the line."""
    epochs = np.unique(np.concatenate([x for x, _ in curves]))
    epochs = epochs[epochs >= 1]
    grid = np.full((len(curves), len(epochs)), np.nan)
    for i, (x, y) in enumerate(curves):
        keep = x >= 1
        grid[i, np.searchsorted(epochs, x[keep])] = y[keep]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns stay NaN
        mean, low, high = np.nanmean(grid, axis=0), np.nanmin(grid, axis=0), np.nanmax(grid, axis=0)
    style = {"markersize": 3 if len(epochs) <= 60 else 0, **style}
    if len(curves) > 1:
        ax.fill_between(epochs, low, high, color=style["color"], alpha=0.18, linewidth=0)
    (line,) = ax.plot(epochs, mean, label=label, **style)
    return line


def _alignment_panel(ax: plt.Axes, table: dict, members: list[int], run_dir: str | os.PathLike) -> None:
    """Top panel of :func:`staircase_figure`: the alignment series of ``members`` on a log-epoch axis, legend
    above; InputError if none has a row at epochs >= 1."""
    handles = _draw_alignment_series(ax, table, members)
    if not handles:
        raise InputError(f"alignment.csv in {Path(run_dir)} has no rows at epochs >= 1 for member(s) {members}")
    lowest = ax.dataLim.y0  # lowest drawn value, bands included (NaN ignored; inf if nothing)
    low = min(-0.05, lowest - 0.05) if np.isfinite(lowest) else -0.05
    ax.axhline(0.0, color="0.6", linewidth=0.8, zorder=0)
    ax.set_xscale("log")
    ax.set_ylim(low, 1.05)
    ax.set_ylabel("alignment with $S^{\\mathrm{sig}}$\n(Pearson r over token pairs"
                  + (", or 1 − MSE where marked)" if any("MSE" in h.get_label() for h in handles) else ")"))
    ax.grid(True, which="major", alpha=0.3)
    _legend_above(ax, handles)


def _draw_alignment_series(ax: plt.Axes, table: dict, members: list[int]) -> list:
    """Draw each alignment series of :func:`staircase_figure` present for ``members`` at epochs >= 1 (order 0,
    the order-1 probes, ``fourier_k<kmax>``); return their lines."""
    series = [("order0", None), ("order1_probe", "order 1: probe, held-out"),
              ("order1_probe_zero_mean", "order 1 beyond order 0: probe with $v \\perp \\mathbf{1}$, held-out")]
    ks = _fourier_ks(table)
    if ks:
        series.append((f"fourier_k{ks[-1]}", f"order 1 via $c_k$, k={ks[-1]}"))
    styles = [dict(color=PALETTE[i], linestyle=ls, marker=mk)
              for i, (ls, mk) in enumerate([("-", "o"), ("--", "s"), ("-.", "^"), (":", "D")])]
    handles = []
    for (signature, label), style in zip(series, styles):
        rows = np.isin(table["member"], members) & (table["signature"] == signature) & (table["epoch"] >= 1)
        if not rows.any():
            continue
        column = "pearson"
        if signature == "order0":
            if table["defined"][rows].any():
                label = "order 0: Pearson r with $S^{\\mathrm{sig},(0)}$"
            else:
                column = "one_minus_mse"
                # two lines: one would be wider than the column-wide figure
                label = "order 0: 1 − MSE (correlation undefined:\nall order-0 signatures equal)"
        curves = [rundir.alignment_series(table, signature, m, column) for m in members]
        handles.append(draw_aggregate(ax, curves, label, style))
    return handles


def _training_panel(ax: plt.Axes, metrics: dict, members: list[int]) -> None:
    """Bottom panel of :func:`staircase_figure`: training loss of ``members`` (left axis) and accuracy (right
    axis, 0..1), legend above."""
    ax_acc = ax.twinx()
    loss_curves = [_metric_series(metrics, m, "loss") for m in members]
    acc_curves = [_metric_series(metrics, m, "acc") for m in members]
    h_loss = draw_aggregate(ax, loss_curves, "training loss", dict(color="#000000", linestyle="-"))
    h_acc = draw_aggregate(ax_acc, acc_curves, "training accuracy", dict(color=PALETTE[4], linestyle="--"))
    ax.set_ylim(bottom=0)
    ax_acc.set_ylim(-0.02, 1.02)
    ax.set_ylabel("cross-entropy (nats)")  # short: the label of the panel above runs down beside it
    ax_acc.set_ylabel("training accuracy (fraction)")
    ax.set_xlabel(_LOG_EPOCH_LABEL)
    ax.grid(True, which="major", alpha=0.3)
    _legend_above(ax, [h_loss, h_acc])


def _legend_above(ax: plt.Axes, handles: list) -> None:
    """A legend of ``handles`` directly above ``ax``, one entry a line (the figures are a column wide)."""
    # In place of a panel title, so that it never covers the data.
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.01), ncol=1, frameon=False,
              borderaxespad=0.2)


def _who(what: str, members: list[int], several: bool) -> str:
    if several:
        return f"{what}\nmean of {len(members)} members; band: min–max over members"
    return f"{what}\nensemble member {members[0]}"


def _spread(n: int, most: int) -> np.ndarray:
    """At most ``most`` evenly spread indices into 0..n-1, always including the first and last."""
    if n <= most:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, most)).astype(int))


def _check_epochs(epochs) -> list[int]:
    values = np.atleast_1d(np.asarray(epochs))
    if values.size == 0 or values.ndim != 1 or values.dtype.kind not in "iu":
        raise InputError(f"epochs must be a non-empty list of integer snapshot epochs, got {epochs!r}")
    return [int(e) for e in values]


def _embeddings(run_dir, epoch: int, member: int, tokens: np.ndarray) -> np.ndarray:
    """Embedding rows ``W_E[member, tokens]`` (T, d) of the snapshot at ``epoch``."""
    W_E = rundir.load_snapshot(run_dir, epoch).get("W_E")
    if W_E is None or W_E.ndim != 3:
        raise InputError(f"snapshot of epoch {epoch} in {Path(run_dir)} has no W_E of shape (K, V, d)")
    if isinstance(member, bool) or not isinstance(member, (int, np.integer)) or not 0 <= member < W_E.shape[0]:
        raise InputError(f"member must be in 0..{W_E.shape[0] - 1} (members in the snapshots), got {member!r}")
    if tokens.size and tokens.max() >= W_E.shape[1]:
        raise InputError(f"signature tokens reach id {tokens.max()} but W_E has only {W_E.shape[1]} rows")
    return np.asarray(W_E[member][tokens], dtype=np.float64)


def _signature_panels(sigs: SignatureHierarchy) -> list[tuple[str, np.ndarray]]:
    """The order-0 view and, when order 1 is present, order 1 through ``c_{P/2}`` from ``signature_views``
    (whose list is order 0, each order m >= 1 flattened, then the Fourier view)."""
    views = signature_views(sigs)
    # Titles of at most two short lines: the panels are about 1.8 in wide.
    picked = [("$S^{\\mathrm{sig},(0)}$\n" + textwrap.fill(views[0][0], 26, break_long_words=False), views[0][1])]
    if len(sigs.orders) > 1:
        picked.append(("$S^{\\mathrm{sig},(1)}$\n" + textwrap.fill(views[-1][0], 26, break_long_words=False),
                       views[-1][1]))
    return picked


def _order0_score(run_dir, member: int, epoch: int, emb: np.ndarray, sigs: SignatureHierarchy) -> str:
    """Title line with the order-0 alignment of one snapshot: alignment.csv's value, else computed."""
    try:
        table = rundir.read_alignment(run_dir)
    except InputError:
        table = None
    if table is not None:
        keep = (table["member"] == member) & (table["epoch"] == epoch) & (table["signature"] == "order0")
        if keep.any():
            i = np.flatnonzero(keep)[0]
            if table["defined"][i]:
                return f"order 0: $\\rho_{{(0)}}$ = {table['pearson'][i]:.3f}"
            return f"order 0: 1 − MSE = {table['one_minus_mse'][i]:.3f}"
    result = compare(cosine_matrix(emb), signature_cosine(sigs.orders[0]))
    if result["defined"]:
        return f"order 0: $\\rho_{{(0)}}$ = {result['pearson']:.3f}"
    return f"order 0: 1 − MSE = {result['one_minus_mse']:.3f}"


@house_style
def order_shares_figure(run_dir: str | os.PathLike, member: int = 0) -> plt.Figure:
    """The staircase in gradient space (SPEC §6.1): from ``theory.csv``, each signature order's
    share of the label-driven embedding gradient (top) and the cosine of its term with the actual
    update −∇loss (bottom), over snapshot epochs ≥ 1 on a log axis, for one member."""
    from ctxstair.analysis.order_shares import read_order_shares

    table = read_order_shares(run_dir)
    keep = (table["member"] == member) & (table["epoch"] >= 1)
    if not keep.any():
        raise InputError(f"theory.csv in {Path(run_dir)} has no rows at epochs >= 1 for member {member}")
    fig, (ax_share, ax_cos) = plt.subplots(2, 1, sharex=True, figsize=(3.6, 4.2), layout="constrained")
    for order in np.unique(table["order"][keep]):
        rows = keep & (table["order"] == order)
        style = dict(color=PALETTE[order % len(PALETTE)], marker="os^D"[order % 4], markersize=3)
        ax_share.plot(table["epoch"][rows], table["share"][rows], label=f"order {order}", **style)
        ax_cos.plot(table["epoch"][rows], table["cosine_with_update"][rows], label=f"order {order}", **style)
    residual = table["relative_residual"][keep]
    ax_share.set_xscale("log")
    ax_share.set_ylim(0, 1)
    ax_share.set_ylabel("share of the label-driven\ngradient norm")
    ax_share.legend(frameon=False)
    ax_share.grid(True, alpha=0.3)
    ax_cos.set_ylim(-1.05, 1.05)
    ax_cos.axhline(0.0, color="0.6", linewidth=0.8, zorder=0)
    ax_cos.set_ylabel("cosine of the order-m term\nwith the actual update −∇loss")
    ax_cos.set_xlabel(_LOG_EPOCH_LABEL)
    ax_cos.grid(True, alpha=0.3)
    fig.suptitle(f"Member {member}: which signature order drives the embeddings when\n"
                 f"(relative residual of the decomposition: {residual.min():.2f}–{residual.max():.2f})")
    return fig

"""Figures of a language-model run (SPEC §7, §8 F7) from its files: ρ_next with the loss, the prefix
probe against its shuffled control, the attention-path correlation over (layer, step), and the
path shares of the embedding update.

    from ctxstair.report.lm_figures import rho_next_figure
    rho_next_figure("runs/lm-staircase").savefig("rho.png")
"""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ctxstair import rundir  # noqa: E402
from ctxstair.analysis.lm_staircase import measure_series, read_lm_analysis  # noqa: E402
from ctxstair.report.run_figures import PALETTE  # noqa: E402

_STEP_LABEL = "training step (symlog scale: linear below 10)"


def step_axis(ax: plt.Axes) -> None:
    """Training steps on a symlog x axis (linear below 10, so step 0 shows), labelled, with a grid."""
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlim(left=0)
    ax.set_xlabel(_STEP_LABEL)
    ax.grid(True, alpha=0.3)


def rho_next_figure(run_dir: str | os.PathLike) -> plt.Figure:
    """Top: ρ_next (Pearson and Spearman) over steps; bottom: the losses (:func:`loss_figure`)."""
    table = rundir.read_alignment(run_dir)
    fig, (ax, ax_loss) = plt.subplots(2, 1, figsize=(8.5, 6.4), sharex=True, height_ratios=(3, 2), layout="constrained")
    for colour, column in zip(PALETTE, ("pearson", "spearman")):
        ax.plot(*rundir.alignment_series(table, "next_token", 0, column), color=colour, marker="o", markersize=3,
                linewidth=1.6, label=f"ρ_next ({column.capitalize()})")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_ylabel("correlation of S^emb(t) with S^next\n(upper triangle over eligible tokens)")
    ax.legend(fontsize=8, frameon=False)
    step_axis(ax)
    _loss_panel(ax_loss, run_dir)
    fig.suptitle("Embeddings vs next-token signatures over training (SPEC §7 ρ_next)")
    return fig


def loss_figure(run_dir: str | os.PathLike) -> plt.Figure:
    """Training loss per step and held-out loss at the snapshots (nats)."""
    fig, ax = plt.subplots(figsize=(8.5, 3.4), layout="constrained")
    _loss_panel(ax, run_dir)
    fig.suptitle("Next-token loss over training")
    return fig


def _loss_panel(ax: plt.Axes, run_dir: str | os.PathLike) -> None:
    rows = rundir.read_metric_rows(run_dir)
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    ax.plot(*zip(*train), color="black", linewidth=0.8, alpha=0.6, label="training loss (batch)")
    ax.plot(*zip(*val), color=PALETTE[1], marker="o", markersize=3, linewidth=1.4, label="held-out loss")
    ax.set_ylabel("next-token loss (nats)")
    ax.legend(fontsize=8, frameon=False)
    step_axis(ax)


def probe_figure(run_dir: str | os.PathLike) -> plt.Figure:
    """Held-out MSE of the first-order prefix probe and of the same probe on shuffled signatures."""
    table = read_lm_analysis(run_dir)
    fig, ax = plt.subplots(figsize=(8.5, 3.8), layout="constrained")
    for colour, (measure, label) in zip(PALETTE, (("probe_heldout_mse", "prefix probe, held-out tokens"),
                                                 ("probe_shuffled_mse", "control: signatures shuffled across tokens"))):
        ax.plot(*measure_series(table, measure), color=colour, marker="o", markersize=3, linewidth=1.6, label=label)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("MSE of cosine similarities\n(pairs of held-out tokens)")
    ax.legend(fontsize=8, frameon=False)
    step_axis(ax)
    fig.suptitle("First-order prefix signatures predict the embedding geometry of unseen tokens (SPEC §7)")
    return fig


def attention_path_figure(run_dir: str | os.PathLike) -> plt.Figure:
    """Heatmap over (layer, snapshot) of the correlation between the attention-path signature and
    ``W_O W_V w_α`` (SPEC §7); columns are snapshots in step order, labelled by step."""
    table = read_lm_analysis(run_dir)
    layers = sorted({int(p) for p, m in zip(table["part"], table["measure"]) if m == "attention_path_corr"})
    steps = measure_series(table, "attention_path_corr", str(layers[0]))[0]
    grid = np.stack([measure_series(table, "attention_path_corr", str(layer))[1] for layer in layers])
    fig, ax = plt.subplots(figsize=(9.5, 1.2 + 0.6 * len(layers)), layout="constrained")
    image = ax.imshow(grid, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ticks = np.unique(np.linspace(0, len(steps) - 1, min(len(steps), 12)).round().astype(int))
    ax.set_xticks(ticks, [str(steps[i]) for i in ticks])
    ax.set_yticks(range(len(layers)), [str(layer) for layer in layers])
    ax.set_xlabel("training step (snapshots in order)")
    ax.set_ylabel("layer")
    fig.colorbar(image, ax=ax, label="Pearson r")
    fig.suptitle("Attention-path signature vs W_O W_V w_α, per layer and snapshot (SPEC §7)")
    return fig


def path_shares_figure(run_dir: str | os.PathLike) -> plt.Figure:
    """Share of each residual path (direct, attention ℓ, MLP ℓ) in the norm of the embeddings'
    update over training (SPEC §6.4)."""
    table = read_lm_analysis(run_dir)
    parts = list(dict.fromkeys(p for p, m in zip(table["part"], table["measure"]) if m == "path_share"))
    fig, ax = plt.subplots(figsize=(8.5, 3.8), layout="constrained")
    cmap = plt.get_cmap("tab10")
    for i, part in enumerate(parts):
        ax.plot(*measure_series(table, "path_share", part), color=cmap(i), linewidth=1.6,
                linestyle="-" if part == "embed" else ("--" if part.startswith("attn") else ":"),
                label="direct (embedding)" if part == "embed" else part)
    ax.set_ylim(-0.02, 1.02)
    ax.set_ylabel("share of the summed path norms")
    ax.legend(fontsize=8, frameon=False, ncol=2)
    step_axis(ax)
    fig.suptitle("Which path moves the embeddings: direct, attention and MLP paths (SPEC §6.4)")
    return fig

"""Figures of ``higher-orders`` (SPEC §8 row C): alignment with orders 0, 1 and 2 over training, with
loss and accuracy; and the probes on each token group (anchors, context tokens) alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.analysis import measures as ms
from ctxstair.analysis.order2 import read_order2
from ctxstair.report.figures import house_style, plt
from ctxstair.report.run_figures import PALETTE, draw_aggregate


@house_style
def orders_figure(run: Path) -> plt.Figure:
    """Top: alignment with orders 0 (1 − MSE), 1 (probe and flat geometry) and 2 (probe) over epochs,
    members' mean and min–max band (``alignment.csv``, ``order2.csv``); bottom: loss and accuracy."""
    table, extra = rundir.read_alignment(run), read_order2(run)
    members = ms.members(run)
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(3.6, 4.4), layout="constrained", height_ratios=(3, 2))
    series = [(table, "order0", "one_minus_mse", "order 0: 1 − MSE with $S^{(0)}$ (Pearson undefined)"),
              (table, "order1_probe", "pearson", "order 1: probe, held-out Pearson"),
              (extra, "order1_flat", "pearson", "order 1: flattened $S^{\\mathrm{sig},(1)}$ (two blocks), Pearson"),
              (extra, "order2_probe", "pearson",
               "order 2: probe $\\varphi^{y;2} \\times_2 v_1 \\times_3 v_2$, held-out Pearson")]
    for j, (source, name, column, label) in enumerate(series):
        curves = [rundir.alignment_series(source, name, m, column) for m in members]
        if any(np.isfinite(c[1][c[0] >= 1]).any() for c in curves):
            draw_aggregate(top, curves, label, dict(color=PALETTE[j], linestyle=("-", "--", "-.", ":")[j]))
        else:
            top.plot([], [], color=PALETTE[j], label=label + ": undefined at every snapshot")
    top.axhline(0.0, color="0.6", lw=0.8)
    top.set_xscale("log")
    top.set_ylabel("alignment of $S^{\\mathrm{emb}}(t)$ with the signature geometry")
    top.legend(loc="lower left")
    top.grid(True, alpha=0.3)
    acc_ax = bottom.twinx()
    draw_aggregate(bottom, [ms.metric_series(run, m, "loss") for m in members], "training loss", dict(color="#000000"))
    draw_aggregate(acc_ax, [ms.metric_series(run, m, "acc") for m in members], "training accuracy",
                    dict(color=PALETTE[4], linestyle="--"))
    bottom.set_ylabel("training loss (cross-entropy, nats)")
    acc_ax.set_ylabel("training accuracy (fraction)")
    acc_ax.set_ylim(-0.02, 1.02)
    bottom.set_xlabel("epoch (log scale; epoch 0 not shown)")
    bottom.grid(True, alpha=0.3)
    fig.legend(*[sum(x, []) for x in zip(bottom.get_legend_handles_labels(), acc_ax.get_legend_handles_labels())],
               loc="lower right")
    fig.suptitle(f"Row C: several higher orders (mean over {len(members)} seed(s), band: min–max)")
    return fig


@house_style
def groups_figure(run: Path) -> plt.Figure:
    """One panel per token group of ``order2.csv`` (``<signature>@<group>`` rows: anchors, context
    tokens): the order-1 probe, the order-1 probe beyond order 0 (v ⟂ 1) and the order-2 probe on the
    group's tokens alone, held-out Pearson over epochs (mean over members, min–max band)."""
    extra = read_order2(run)
    groups = sorted({str(name).split("@", 1)[1] for name in extra["signature"] if "@" in str(name)})
    members = ms.members(run)
    fig, axes = plt.subplots(1, max(1, len(groups)), figsize=(2.8 * max(1, len(groups)), 2.8), squeeze=False,
                             sharey=True, layout="constrained")
    for ax, group in zip(axes[0], groups):
        for j, (name, label) in enumerate([("order1_probe", "order-1 probe"),
                                           ("order1_probe_zero_mean", "order-1 probe, zero-mean v (beyond order 0)"),
                                           ("order2_probe", "order-2 probe")]):
            curves = [rundir.alignment_series(extra, f"{name}@{group}", m) for m in members]
            draw_aggregate(ax, curves, label, dict(color=PALETTE[j + 1], linestyle=("-", "--", "-.")[j]))
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("epoch (log scale; epoch 0 not shown)")
        ax.set_title(f"{group} alone")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="lower right")
    axes[0][0].set_ylabel("held-out Pearson of the probe with $S^{\\mathrm{emb}}(t)$")
    fig.suptitle(f"Row C by token group: each order on one group's tokens (mean over {len(members)} seed(s), band: "
                 "min–max)")
    return fig

"""Figures of an attention-only run from ``attention.csv`` (SPEC §6.3, §8 F5b): attention and
embedding norms per token group, and each gradient path's share over training.

    from ctxstair.report.attention_figures import attention_dynamics_figure
    attention_dynamics_figure("runs/attention-parity").savefig("dynamics.png")
"""

from __future__ import annotations

import os

import matplotlib.pyplot as plt
import numpy as np

from ctxstair.analysis.attention_groups import group_series, read_attention_run
from ctxstair.report.figures import house_style
from ctxstair.report.run_figures import PALETTE
from ctxstair.theory.attention_run import PATHS

_EPOCH_LABEL = "epoch (symlog scale: linear below 1)"


def _groups(table: dict) -> list[str]:
    return list(dict.fromkeys(table["group"].tolist()))


@house_style
def attention_dynamics_figure(run_dir: str | os.PathLike, member: int = 0, seq_len: int | None = None) -> plt.Figure:
    """Two panels over training: attention paid by the last position to an occurrence of each token
    group (mean over occurrences; dashed line: uniform attention 1/L when ``seq_len`` is given) and
    the mean embedding norm ``|w_α|`` of each group.

    Returns:
        Figure with two axes sharing the epoch axis.
    """
    table = read_attention_run(run_dir)
    fig, (ax_a, ax_n) = plt.subplots(1, 2, figsize=(7.0, 2.6), sharex=True, layout="constrained")
    for colour, group in zip(PALETTE, _groups(table)):
        for ax, column in ((ax_a, "attention"), (ax_n, "norm")):
            ax.plot(*group_series(table, group, member, column), color=colour, linewidth=1.6, label=group)
    if seq_len:
        ax_a.axhline(1 / seq_len, color="grey", linestyle="--", linewidth=1, label=f"uniform, 1/L = 1/{seq_len}")
    ax_a.set_ylim(-0.02, 1.02)
    ax_a.set_ylabel("attention per occurrence (fraction of the\nlast position's attention)")
    ax_a.set_title("Attention received by each token group")
    ax_n.set_ylim(bottom=0)
    ax_n.set_ylabel("mean embedding norm |w_α|")
    ax_n.set_title("Embedding norm of each token group")
    for ax in (ax_a, ax_n):
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(left=0)
        ax.set_xlabel(_EPOCH_LABEL)
        ax.grid(True, alpha=0.3)
        ax.legend(frameon=False)
    fig.suptitle(f"Member {member}: attention sets the rate — attention and embedding norm per token group")
    return fig


@house_style
def path_shares_figure(run_dir: str | os.PathLike, member: int = 0) -> plt.Figure:
    """One panel per token group: the share of the value, key and query paths in the actual update
    ``−∇_{W_E} loss`` of the group's embeddings (path norm / sum of the three path norms) over training.

    Returns:
        Figure with one axis per group.
    """
    table = read_attention_run(run_dir)
    groups = _groups(table)
    fig, axes = plt.subplots(1, len(groups), figsize=(2.6 * len(groups), 2.6), squeeze=False, sharey=True,
                             layout="constrained")
    for ax, group in zip(axes[0], groups):
        epochs, _ = group_series(table, group, member, "path_value")
        norms = np.stack([group_series(table, group, member, f"path_{p}")[1] for p in PATHS])
        total = norms.sum(axis=0)
        shares = np.divide(norms, total, out=np.full_like(norms, np.nan), where=total > 0)
        for colour, path, share in zip(PALETTE, PATHS, shares):
            ax.plot(epochs, share, color=colour, linewidth=1.6, label=f"{path} path")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(left=0)
        ax.set_xlabel(_EPOCH_LABEL)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{group}")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("share of the update's norm")
    axes[0][-1].legend(frameon=False)
    fig.suptitle(f"Member {member}: which use of the embeddings moves them — value, key and query paths (SPEC §6.3)")
    return fig

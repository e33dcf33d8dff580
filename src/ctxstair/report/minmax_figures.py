"""Figures of ``minmax`` (SPEC §8 S72): order-0 signatures against their closed forms, the
superposition score, and the trained model's logits against it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.report.figures import house_style, plt
from ctxstair.report.formats import fmt
from ctxstair.report.run_figures import PALETTE
from ctxstair.signatures.superposition import closed_form_signatures, superposition_scores
from ctxstair.tasks import Dataset


@house_style
def signature_figure(run: Path, N: int) -> plt.Figure:
    """Computed order-0 signatures (``signatures.npz``) of a number and both anchors against the closed forms."""
    sigs = rundir.read_signatures(run)
    closed = closed_form_signatures(N)
    shown = {f"number x = {N // 2}": N // 2 - 1, "anchor a (max)": N, "anchor b (min)": N + 1}
    fig, axes = plt.subplots(1, 3, figsize=(7.2, 2.4), layout="constrained", sharey=True)
    for ax, (title, i) in zip(axes, shown.items()):
        ax.bar(sigs.labels, sigs.orders[0][i], color="0.75", label="computed from the data")
        ax.plot(sigs.labels, closed[i], color=PALETTE[1], marker=".", label="closed form (S72)")
        ax.set_title(title)
        ax.set_xlabel("label ν")
    axes[0].set_ylabel("$\\varphi^{y;0}(\\nu)$ (probability)")
    axes[0].legend()
    fig.suptitle(f"minmax, N = {N}: order-0 label signatures")
    return fig


@house_style
def superposition_figure(run: Path, dataset: Dataset) -> plt.Figure:
    """The superposition score of two samples with the same numbers and either anchor; the argmax marked."""
    sigs = rundir.read_signatures(run)
    N = int(dataset.params["N"])
    x1, x2 = N // 4, 3 * N // 4
    fig, axes = plt.subplots(1, 2, figsize=(7.0, 2.4), layout="constrained", sharey=True)
    for ax, anchor, rule in zip(axes, (dataset.meta["anchor_max"], dataset.meta["anchor_min"]), ("max", "min")):
        score = superposition_scores(np.array([[anchor, x1, x2]]), sigs.tokens, sigs.orders[0])[0]
        best = sigs.labels[score.argmax()]
        ax.plot(sigs.labels, score, color=PALETTE[0], marker="o", markersize=3)
        ax.axvline(best, color=PALETTE[1], ls="--", lw=1)
        ax.set_title(f"anchor {'a' if rule == 'max' else 'b'} ({rule}), x1 = {x1}, x2 = {x2}: argmax ν = {best}")
        ax.set_xlabel("label ν")
    axes[0].set_ylabel("(φ_c + φ_x1 + φ_x2)(ν)")
    fig.suptitle("Superposition of order-0 signatures picks the max or the min")
    return fig


@house_style
def logit_figure(score: np.ndarray, logits: dict[int, np.ndarray], member: dict) -> plt.Figure:
    """One member's logits (n, labels) at its order-0 peak and at the end (``logits`` by epoch) against
    the superposition score (n, labels), as hexbin densities; ``member`` is its row of the summary."""
    fig, axes = plt.subplots(1, 2, figsize=(7.0, 2.6), layout="constrained")
    for ax, epoch, when in zip(axes, (member["peak_epoch"], member["last_epoch"]), ("peak", "end")):
        logits_now = logits[epoch]
        ax.hexbin(score.ravel(), logits_now.ravel(), gridsize=40, bins="log", cmap="viridis", mincnt=1)
        ax.set_title(f"epoch {epoch}: Pearson r = {fmt(member[f'corr_{when}'])} "
                     f"(occurrence-weighted score: {fmt(member[f'corr_weighted_{when}'])})")
        ax.set_xlabel("superposition score (φ_c + φ_x1 + φ_x2)(ν)")
        ax.set_ylabel("model logit f(X)_ν")
    fig.suptitle(f"minmax: logits of member {member['member']} vs the superposition score (all samples × labels 1..N; "
                 "colour: log count)")
    return fig

"""Figure of ``label-law`` (SPEC §8 F2a): the label law predicted from an anchor's embedding alone
against the anchor's order-0 label signature, one panel per law."""

from __future__ import annotations

import numpy as np

from ctxstair.report.figures import house_style, plt
from ctxstair.report.formats import fmt


@house_style
def label_law_figure(laws: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, dict]]
                     ) -> plt.Figure:
    """``laws``: law name -> (labels (Y,), data law φ^{y;0}_a (Y,), prescribed law p_a (Y,), model law
    softmax(W_U w_a) (Y,), epoch, :func:`ctxstair.alignment.distribution_match` of model and data)."""
    fig, axes = plt.subplots(1, len(laws), figsize=(2.4 * len(laws), 2.4), squeeze=False, layout="constrained")
    for ax, (law, (labels, p_data, p_law, p_model, epoch, match)) in zip(axes[0], laws.items()):
        ax.bar(labels, p_data, color="0.75", label="data: $\\varphi^{y;0}_a$ (empirical label law)")
        ax.plot(labels, p_law, color="black", lw=1.0, ls="--", label="prescribed law $p_a$")
        ax.plot(labels, p_model, color="#D55E00", marker=".", label="model: softmax$(W_U w_a)$, renormalised")
        ax.set_xlabel("label ν")
        ax.set_ylabel("probability")
        ax.set_title(f"{law} law, epoch {epoch}: r = {fmt(match['pearson'])}, JSD = {fmt(match['jsd'], 4)}")
    axes[0][0].legend(loc="upper right")
    fig.suptitle("F2a: label law predicted from the anchor's embedding alone vs the anchor's order-0 signature")
    return fig

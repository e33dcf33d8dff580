"""The attention-path correlation of every layer with its permutation null (SPEC §7), on the model
itself: its post-softmax attention on the setup's window sample, and ``z_α = W_O W_V w_α``."""

from __future__ import annotations

from ctxstair.checks import check_sequences
from ctxstair.measure import primitives
from ctxstair.measure.estimators import Estimator
from ctxstair.measure.schema import ATTENTION_CORR, ATTENTION_NULL, key
from ctxstair.models.view import view_of


def _measure(setup, model, V: int, counts) -> dict:
    """``attention_path_corr/ℓ`` and ``attention_path_null/ℓ`` of every layer, on
    :meth:`~ctxstair.measure.staircase.StaircaseSetup.path_sample` (or from ``counts`` of it)."""
    sample = setup.path_sample(view_of(model).positions)
    check_sequences(sample, V, "the window sample")
    row = {}
    for layer, corr, null in primitives.attention_path_scores(model, sample, setup.tokens, V,
                                                            setup.settings.null_permutations, counts):
        row[key(ATTENTION_CORR, str(layer))] = float(corr)
        row[key(ATTENTION_NULL, str(layer))] = float(null)
    return row


ESTIMATOR = Estimator("attention paths", (ATTENTION_CORR, ATTENTION_NULL), reads="model", order=30, switch="paths",
                      on_model=_measure)

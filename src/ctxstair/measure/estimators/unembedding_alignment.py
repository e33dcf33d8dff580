"""The unembedding alignment ``R_cos(W_U, φ^pre)`` (SPEC §7; the predecessor paper, arXiv 2509.20124):
the Pearson correlation, over the pairs a < b of the token set T, of the cosine matrix of the
tokens' unembedding rows with that of their previous-token signatures
``φ^pre_ν(α) = P(x_s = α | x_{s+1} = ν)`` — the output side's counterpart of ρ_next: a token's
unembedding row is pushed toward the tokens that precede it, as its embedding row is toward the
tokens that follow.

It needs the corpus windows (the previous-token signature over all V is not among the counts of a
statistics directory) and a model with an unembedding; a tied model's is its embedding.
"""

from __future__ import annotations

import torch

from ctxstair.alignment.similarity import compare, cosine_matrix, signature_cosine
from ctxstair.measure.estimators import Estimator
from ctxstair.measure.schema import UNEMBEDDING_ALIGNMENT
from ctxstair.models.view import view_of
from ctxstair.signatures import previous_token_signature


def _measure(setup, model, V: int, counts) -> dict:
    """``unembedding_alignment`` of one network (none for a model without an unembedding)."""
    view = view_of(model)
    if view.unembedding is None:
        return {}
    previous = setup.derived("previous-token cosines", lambda: signature_cosine(
        previous_token_signature(setup.windows, V, tokens=setup.tokens)))  # (T, T), counted once per setup
    rows = view.rows(view.unembedding, torch.from_numpy(setup.tokens))
    return {UNEMBEDDING_ALIGNMENT: float(compare(cosine_matrix(rows.double().cpu().numpy()), previous)["pearson"])}


def _available(setup) -> str | None:
    return None if setup.windows is not None else "the unembedding alignment needs the corpus windows"


ESTIMATOR = Estimator("unembedding alignment", (UNEMBEDDING_ALIGNMENT,), reads="model", order=50, switch="paths",
                      on_model=_measure, available=_available)

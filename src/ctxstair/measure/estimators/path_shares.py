"""Each path's share of the embedding update (SPEC §6.4), on the model itself: the vector-Jacobian
product of each summand of its residual stream (and of a tied unembedding), on the first
``path_windows`` windows of the setup's sample."""

from __future__ import annotations

from ctxstair.measure import primitives
from ctxstair.measure.estimators import Estimator
from ctxstair.measure.schema import PATH_SHARE, key
from ctxstair.models.view import view_of


def _measure(setup, model, V: int, counts) -> dict:
    """``path_share/<path>`` for ``embed``, ``attn.ℓ``, ``mlp.ℓ`` (and ``unembed`` when tied)."""
    sample = setup.path_sample(view_of(model).positions)[: setup.settings.path_windows]
    shares = primitives.path_shares(model, sample, setup.tokens)
    return {key(PATH_SHARE, name): float(share) for name, share in shares.items()}


ESTIMATOR = Estimator("path shares", (PATH_SHARE,), reads="model", order=40, switch="paths", on_model=_measure)

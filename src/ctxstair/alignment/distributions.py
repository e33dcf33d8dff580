"""Single-token check: a model's predicted label distribution against the data's (SPEC §3)."""

from __future__ import annotations

import numpy as np
from scipy.special import rel_entr

from ctxstair.alignment.similarity import CONSTANT_RTOL, _pearson, _scalar_if_0d
from ctxstair.checks import float_array
from ctxstair.errors import InputError


def distribution_match(p_model: object, p_data: object, *, atol: float = 1e-6) -> dict:
    """Compare predicted label distributions with data distributions (SPEC §3, "single-token check").

    Typically ``p_model = softmax(W_U w^E_a)`` and ``p_data = φ^{y;0}_a``.

    Args:
        p_model: (V,) probability vector, or a batch (B, V).
        p_data: same shape as ``p_model``.
        atol: allowed deviation of each vector's sum from 1.

    Returns:
        dict of floats, or of (B,) arrays for a batch: ``pearson``, the Pearson r between the two
            vectors (NaN when either is constant, e.g. a uniform label law, with the tolerance of
            :func:`~ctxstair.alignment.compare`); ``kl``, KL(p_data ‖ p_model) = Σ p_data log(p_data /
            p_model) in nats, the data-weighted direction (the loss the model minimises, up to the data
            entropy; ``0 · log 0 = 0``, and ``inf`` when the model gives 0 to a label the data uses);
            ``jsd``, the Jensen–Shannon divergence in nats, in [0, ln 2].
    """
    q = _probabilities(p_model, "p_model", atol)
    p = _probabilities(p_data, "p_data", atol)
    if p.shape != q.shape:
        raise InputError(f"p_model and p_data must have the same shape, got {q.shape} and {p.shape}")
    mid = (p + q) / 2
    jsd = (rel_entr(p, mid).sum(axis=-1) + rel_entr(q, mid).sum(axis=-1)) / 2
    return {
        "pearson": _scalar_if_0d(_pearson(q, p, CONSTANT_RTOL)[0]),
        "kl": _scalar_if_0d(rel_entr(p, q).sum(axis=-1)),
        "jsd": _scalar_if_0d(np.clip(jsd, 0.0, np.log(2))),
    }


def _probabilities(x: object, name: str, atol: float) -> np.ndarray:
    """Check probability vectors (V,) or (B, V): non-negative, each summing to 1 within ``atol``."""
    arr = float_array(x, name)
    if arr.ndim > 2:
        raise InputError(f"{name} must have shape (V,) or (B, V), got shape {arr.shape}")
    if np.any(arr < 0) or np.any(np.abs(arr.sum(axis=-1) - 1) > atol):
        raise InputError(
            f"{name} must hold non-negative probabilities that sum to 1 (within {atol:g}) along the last axis"
        )
    return arr

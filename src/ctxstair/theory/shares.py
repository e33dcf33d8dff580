"""Which signature order drives the embeddings when: order shares over training (SPEC §6.1).

For every snapshot of a CBOW run and every ensemble member, the label-driven gradient of the task
tokens' embeddings is split into its order-m terms (:func:`cbow_label_terms` for a polynomial
activation, :func:`cbow_terms_with_fit` for ReLU/GELU/tanh), and each term is compared with the
actual update ``−∇ mean loss`` (autograd, exact softmax). :func:`order_shares` gives, per order,

    order, norm, share, cosine_with_update, relative_residual

(written per snapshot and member to ``theory.csv`` by :mod:`ctxstair.analysis.order_shares`):
``norm`` is the Frobenius norm of the order-m term over the task tokens and coordinates; ``share``
is that norm divided by the sum over orders; ``cosine_with_update`` the cosine between the term and
the actual update (both flattened over tokens × coordinates); ``relative_residual`` (same for every
order of one snapshot) is ‖autograd label gradient − Σ terms‖ / ‖autograd label gradient‖, zero up
to rounding for a polynomial activation and the fit error otherwise.
"""

from __future__ import annotations

import numpy as np

from ctxstair.theory.activation_fit import cbow_terms_with_fit
from ctxstair.theory.cbow_terms import cbow_label_terms
from ctxstair.theory.reference import embedding_gradient


def order_shares(W_E: np.ndarray, W_U: np.ndarray, X: np.ndarray, y: np.ndarray, tokens: np.ndarray,
                 activation: str, coeffs=(), power: int = 2) -> list[dict]:
    """Per-order norm, share and cosine with the actual update for one model (W_E, W_U (V, d))."""
    W_E, W_U = np.asarray(W_E, dtype=np.float64), np.asarray(W_U, dtype=np.float64)
    if activation == "poly":
        terms = cbow_label_terms(W_E, W_U, X, y, coeffs, tokens)
        label = embedding_gradient(W_E, W_U, X, y, "label", activation, coeffs)[tokens]
        residual = np.linalg.norm(label - terms.sum(axis=1)) / max(np.linalg.norm(label), 1e-300)
    elif activation == "monomial":
        coeffs = [0.0] * (power - 1) + [1.0]
        return order_shares(W_E, W_U, X, y, tokens, "poly", coeffs)
    else:
        fit = cbow_terms_with_fit(W_E, W_U, X, y, activation, tokens=tokens)
        terms, residual = fit.terms, fit.relative_residual
    update = -embedding_gradient(W_E, W_U, X, y, "loss", activation, coeffs, power)[tokens].ravel()
    norms = np.linalg.norm(terms, axis=(0, 2))
    flat = terms.transpose(1, 0, 2).reshape(terms.shape[1], -1)
    denom = norms * np.linalg.norm(update)
    cosines = np.divide(flat @ update, denom, out=np.full(norms.size, np.nan), where=denom > 0)
    total = norms.sum()
    return [{"order": m, "norm": float(norms[m]), "share": float(norms[m] / total) if total > 0 else float("nan"),
             "cosine_with_update": float(cosines[m]), "relative_residual": float(residual)}
            for m in range(norms.size)]

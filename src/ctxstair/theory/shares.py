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

from ctxstair.theory.activation_fit import cbow_terms_with_fit, preactivation_ranges
from ctxstair.theory.cbow_terms import cbow_label_terms
from ctxstair.theory.reference import embedding_gradients


def order_shares(W_E: np.ndarray, W_U: np.ndarray, X: np.ndarray, y: np.ndarray, tokens: np.ndarray,
                 activation: str, coeffs=(), power: int = 2) -> list[dict]:
    """Per-order norm, share and cosine with the actual update for one model (W_E, W_U (V, d))."""
    return stacked_order_shares(np.asarray(W_E)[None], np.asarray(W_U)[None], X, y, tokens, activation, coeffs,
                                power)[0]


def stacked_order_shares(W_E: np.ndarray, W_U: np.ndarray, X: np.ndarray, y: np.ndarray, tokens: np.ndarray,
                         activation: str, coeffs=(), power: int = 2) -> list[list[dict]]:
    """:func:`order_shares` of K models, W_E and W_U (K, V, d) (e.g. every snapshot of a run): the
    autograd gradients are taken for many models per batched pass; one list of rows per model."""
    if activation == "monomial":
        activation, coeffs = "poly", [0.0] * (power - 1) + [1.0]
    W_E, W_U = np.asarray(W_E, dtype=np.float64), np.asarray(W_U, dtype=np.float64)
    # Models per autograd pass: the (chunk, n, max(V, d)) activations stay near 2^24 entries (128 MiB).
    chunk = max(1, 2**24 // (len(X) * max(W_E.shape[1:])))
    # One forward pass per chunk for both gradients (what the two objectives share).
    pairs = [embedding_gradients(W_E[i:i + chunk], W_U[i:i + chunk], X, y, ("label", "loss"), activation, coeffs)
             for i in range(0, W_E.shape[0], chunk)]
    label, update = (np.concatenate([pair[j][:, tokens] for pair in pairs]) for j in (0, 1))  # (K, T, d) each
    update = -update
    fit_ranges = preactivation_ranges(W_E, X) if activation != "poly" else None
    shares = []
    for k in range(W_E.shape[0]):
        if activation == "poly":
            terms = cbow_label_terms(W_E[k], W_U[k], X, y, coeffs, tokens)
            residual = np.linalg.norm(label[k] - terms.sum(axis=1)) / max(np.linalg.norm(label[k]), 1e-300)
        else:
            fit = cbow_terms_with_fit(W_E[k], W_U[k], X, y, activation, fit_range=fit_ranges[k], tokens=tokens,
                                      gradient=label[k])
            terms, residual = fit.terms, fit.relative_residual
        shares.append(_share_rows(terms, update[k].ravel(), residual))
    return shares


def _share_rows(terms: np.ndarray, update: np.ndarray, residual: float) -> list[dict]:
    """Rows of :func:`order_shares` from the order terms (T, M+1, d) and the flattened actual update."""
    norms = np.linalg.norm(terms, axis=(0, 2))
    flat = terms.transpose(1, 0, 2).reshape(terms.shape[1], -1)
    denom = norms * np.linalg.norm(update)
    cosines = np.divide(flat @ update, denom, out=np.full(norms.size, np.nan), where=denom > 0)
    total = norms.sum()
    return [{"order": m, "norm": float(norms[m]), "share": float(norms[m] / total) if total > 0 else float("nan"),
             "cosine_with_update": float(cosines[m]), "relative_residual": float(residual)}
            for m in range(norms.size)]

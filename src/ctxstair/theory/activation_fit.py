"""Order decomposition for ReLU, GELU and tanh models through a polynomial fit of σ (SPEC §6.1).

The identity of SPEC §6.1 is exact only for a polynomial activation. For the paper's ReLU runs the
activation is replaced by its least-squares polynomial ``σ(z) ≈ Σ_{k=1}^K C_k z^k`` on the range
``[−a, a]`` that the pre-activations ``h`` actually visit, the order terms are computed for that
polynomial, and the **residual** — the autograd label-driven gradient of the real activation minus
the sum of the terms — is returned with its relative size, so a reader sees how much of the
gradient the decomposition accounts for.

Defaults (stated in docs/theory.md): degree ``K = 6`` (orders up to ``min(L−1, 5)``), least squares
on σ over a grid of 2001 evenly spaced points on ``[−a, a]``, no constant term (``σ(0) = 0`` like
every activation of the models), and ``a = max |h|`` over the dataset, so the polynomial is never
evaluated outside its fitted range (a smaller ``a`` makes it blow up on the largest ``h``; a larger
one wastes accuracy where ``h`` never goes). ReLU is positively homogeneous, so its fit scales with
``a`` exactly (``C_k a^{k−1}`` is fixed) and its relative residual does not depend on the weight
scale; its σ' is a step, which no low-degree polynomial follows closely, so expect a residual of
about a third of the gradient (docs/theory.md has measurements). GELU and tanh are smooth and
their residuals are small while ``max |h|`` stays below about 1 (tanh, degree 6: 4 % at
``max |h| = 2.1``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ctxstair.checks import check_sequences
from ctxstair.errors import InputError
from ctxstair.models import activation_fn
from ctxstair.theory.cbow_terms import cbow_label_terms
from ctxstair.theory.reference import embedding_gradient

__all__ = ["ActivationFitTerms", "DEFAULT_DEGREE", "cbow_terms_with_fit", "fit_activation", "preactivation_range",
           "preactivation_ranges"]

#: Default polynomial degree K of the fit.
DEFAULT_DEGREE = 6
#: Number of evenly spaced grid points on [−a, a] for the least-squares fit.
GRID_POINTS = 2001
FITTABLE = ("relu", "gelu", "tanh")


def fit_activation(name: str, degree: int = DEFAULT_DEGREE, fit_range: float = 1.0) -> np.ndarray:
    """Least-squares polynomial ``σ(z) ≈ Σ_{k=1}^K C_k z^k`` on ``[−fit_range, fit_range]`` (SPEC §6.1).

    Args:
        name: ``relu``, ``gelu`` or ``tanh`` (as :func:`ctxstair.models.activation_fn`).
        degree: K >= 1.
        fit_range: a > 0, the half-width of the fitted interval; pass the scale of the
            pre-activations ``h`` (see :func:`preactivation_range`).

    Returns:
        float64 (K,) coefficients ``C_1..C_K`` (the ``coeffs`` of the ``poly`` activation).
    """
    if name not in FITTABLE:
        raise InputError(f"fit_activation: activation must be one of {', '.join(FITTABLE)}, got {name!r}")
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < 1:
        raise InputError(f"fit_activation: degree must be an integer >= 1, got {degree!r}")
    if not (np.isfinite(fit_range) and fit_range > 0):
        raise InputError(f"fit_activation: fit_range must be a positive number, got {fit_range!r}")
    # Fit c_k on u = z / a in [−1, 1] (well conditioned), then C_k = c_k / a^k.
    u = np.linspace(-1.0, 1.0, GRID_POINTS)
    values = activation_fn(name)(torch.from_numpy(u * fit_range)).numpy()
    k = np.arange(1, degree + 1)
    scaled, *_ = np.linalg.lstsq(u[:, None] ** k, values, rcond=None)
    return scaled / float(fit_range) ** k


def preactivation_range(W_E: np.ndarray, X: np.ndarray) -> float:
    """``max |h|`` over samples and coordinates, ``h = Σ_i W_E[x_i]``: the default fit range.

    Args: W_E float (V, d); X int (n, L). Returns a float (tiny but positive if W_E is zero).
    """
    return float(preactivation_ranges(np.asarray(W_E)[None], X)[0])


def preactivation_ranges(W_E: np.ndarray, X: np.ndarray) -> np.ndarray:
    """:func:`preactivation_range` of each of K models W_E (K, V, d) on the same X (n, L): (K,) floats.
    The (n, V) token counts of X are built once for all models."""
    W_E = np.asarray(W_E, dtype=np.float64)
    X = check_sequences(X, W_E.shape[1])
    counts = np.zeros((X.shape[0], W_E.shape[1]))
    np.add.at(counts, (np.arange(X.shape[0])[:, None], X), 1.0)
    return np.array([max(float(np.abs(counts @ model).max()), np.finfo(np.float64).tiny) for model in W_E])


@dataclass(frozen=True)
class ActivationFitTerms:
    """Order terms of a fitted polynomial and what they leave out (SPEC §6.1).

    Attributes:
        terms: (T, M+1, d) label-driven order terms of the fitted polynomial.
        coeffs: (K,) fitted ``C_1..C_K``; fit_range: a; degree: K.
        gradient: (T, d) autograd label-driven gradient of the real activation.
        residual: (T, d) ``gradient − terms.sum(axis=1)``.
        relative_residual: ``‖residual‖ / ‖gradient‖`` (Frobenius norms over tokens and coordinates).
    """

    terms: np.ndarray
    coeffs: np.ndarray
    fit_range: float
    degree: int
    gradient: np.ndarray
    residual: np.ndarray
    relative_residual: float


def cbow_terms_with_fit(W_E: np.ndarray, W_U: np.ndarray, X: np.ndarray, y: np.ndarray, activation: str,
                        degree: int = DEFAULT_DEGREE, fit_range: float | None = None,
                        tokens: np.ndarray | None = None, gradient: np.ndarray | None = None) -> ActivationFitTerms:
    """Label-driven order terms of a ReLU/GELU/tanh CBOW model via a polynomial fit, with residual.

    Args:
        W_E, W_U: float (V, d); X: int (n, L); y: int (n,).
        activation: ``relu``, ``gelu`` or ``tanh``.
        degree: as :func:`fit_activation`.
        fit_range: half-width of the fit; default :func:`preactivation_range` of (W_E, X).
        tokens: optional (T,) token ids (default all V).
        gradient: the autograd label gradient of those tokens (T, d) when the caller has it already
            (e.g. for many snapshots in one pass); computed here otherwise.

    Returns:
        :class:`ActivationFitTerms`; ``terms`` has shape (T, min(L−1, degree−1) + 1, d).
    """
    a = preactivation_range(W_E, X) if fit_range is None else float(fit_range)
    coeffs = fit_activation(activation, degree, a)
    terms = cbow_label_terms(W_E, W_U, X, y, coeffs, tokens)
    rows = np.arange(np.shape(W_E)[0]) if tokens is None else np.asarray(tokens)
    if gradient is None:
        gradient = embedding_gradient(W_E, W_U, X, y, "label", activation)[rows]
    residual = gradient - terms.sum(axis=1)
    scale = np.linalg.norm(gradient)
    return ActivationFitTerms(terms=terms, coeffs=coeffs, fit_range=a, degree=int(degree),
                              gradient=gradient, residual=residual,
                              relative_residual=float(np.linalg.norm(residual) / scale) if scale > 0 else float("nan"))

"""Late regime (SPEC §6.2): when embeddings are large and ``K ≫ L``, how big is each order?

SPEC §6.2 states that every order then scales like ``s_U s_E^{K−1}`` with the combinatorial
prefactor ``B_m(K) = (m+1)! S(K−1, m+1)`` (S = Stirling numbers of the second kind), so the highest
reachable order ``L−1`` dominates. What the expansion of :mod:`ctxstair.theory.cbow_terms` gives:

* At embedding scale ``s_E ≫ 1`` the top degree ``k = K`` of σ dominates every order, and that part
  is homogeneous of degree ``K−1`` in ``W_E`` and 1 in ``W_U``: every order scales like
  ``s_U s_E^{K−1}`` (exact for ``σ = z^K``).
* The multinomial weight of order m, summed over its exponent patterns, is
  ``N_m(K) = Σ_{l >= 0, n_1..n_m >= 1, l + Σn = K−1} (K−1)! / (l! Π n_r!)`` — the number of maps from
  ``K−1`` factors to ``{α, β_1..β_m}`` that hit every ``β_r`` — which is
  ``(m+1)! S(K−1, m+1) + m! S(K−1, m) = B_m(K) + m! S(K−1, m)``. ``B_m(K)`` counts only the patterns
  in which ``w_α`` itself also appears (``l >= 1``); the patterns with ``l = 0`` add
  ``m! S(K−1, m)``, relatively ``≈ (m/(m+1))^{K−1}`` — negligible only for ``K ≫ m``.
* The order-m term also carries ``C(L−1, m)`` (the number of m-sets of context positions,
  SPEC §6.1), so the *ratio* of order m to order 0 is ``C(L−1, m) N_m(K)``, and
  ``Σ_m C(L−1, m) N_m(K) = L^{K−1}`` (every factor of ``h^{K−1}`` picks one of the L positions).
* These counts become the norm ratios only if every product ``w_α^{l} Π_r w_{β_r}^{n_r}`` is the
  same vector, i.e. when all embeddings are (nearly) equal — the collinear state of a plateau. Then,
  by marginal consistency of the signatures, order m is exactly ``C(L−1, m) N_m(K)`` times order 0
  for every token (:func:`collinear_order_ratios`). For embeddings in different directions the
  products of odd powers cancel across context tokens and the measured ratios fall below the
  counts; docs/theory.md reports both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ctxstair.errors import InputError
from ctxstair.tasks import Dataset
from ctxstair.theory.cbow_terms import cbow_label_terms

__all__ = ["collinear_order_ratios", "late_regime_prefactor", "late_regime_scan", "order_norm_ratios",
           "order_pattern_count", "stirling2"]


def stirling2(n: int, k: int) -> int:
    """Stirling number of the second kind ``S(n, k)`` (exact integer; ``S(0, 0) = 1``)."""
    if n < 0 or k < 0:
        raise InputError(f"stirling2 needs n, k >= 0, got {n}, {k}")
    row = [1] + [0] * k  # S(0, j)
    for _ in range(1, n + 1):
        row = [0] + [j * row[j] + row[j - 1] for j in range(1, k + 1)]
    return row[k]


def late_regime_prefactor(m: int, K: int) -> int:
    """SPEC §6.2's ``B_m(K) = (m+1)! S(K−1, m+1)``: exponent patterns of order m in ``h^{K−1}`` in which
    ``w_α`` and each of the m context tokens appear (exact integer; ``K >= 1``, ``m >= 0``)."""
    if K < 1 or m < 0:
        raise InputError(f"late_regime_prefactor needs K >= 1 and m >= 0, got m={m}, K={K}")
    return math.factorial(m + 1) * stirling2(K - 1, m + 1)


def order_pattern_count(m: int, K: int) -> int:
    """``N_m(K) = (m+1)! S(K−1, m+1) + m! S(K−1, m)``: the total multinomial weight of order m in
    ``h^{K−1}`` (``w_α`` may or may not appear); ``B_m(K)`` plus the ``l = 0`` patterns."""
    return late_regime_prefactor(m, K) + math.factorial(m) * stirling2(K - 1, m)


def collinear_order_ratios(L: int, K: int) -> np.ndarray:
    """``C(L−1, m) N_m(K)`` for ``m = 0..min(L−1, K−1)``: the exact ratio (order m / order 0) of the
    label-driven terms of ``σ = z^K`` when every embedding is the same vector. float64 (M+1,)."""
    return np.array([math.comb(L - 1, m) * order_pattern_count(m, K) for m in range(min(L - 1, K - 1) + 1)],
                    dtype=np.float64)


def order_norm_ratios(terms: np.ndarray) -> np.ndarray:
    """``‖order m‖ / ‖order 0‖`` from (T, M+1, d) terms (Frobenius norm over tokens and coordinates)."""
    norms = np.linalg.norm(np.asarray(terms), axis=(0, 2))
    return norms / norms[0]


def late_regime_scan(dataset: Dataset, K: int, scales: Sequence[float], spreads: Sequence[float], d: int = 16,
                     seed: int = 0, coeffs: Sequence[float] | None = None) -> np.ndarray:
    """Measured order ratios at large embedding scale (SPEC §6.2), for comparison with the counts.

    Embeddings ``W_E[β] = s (u + ε g_β)`` with one shared direction ``u`` and per-token ``g_β``
    (entries N(0, 1)); ``ε = spread`` interpolates between collinear (0) and independent (large)
    embeddings; ``W_U`` entries N(0, 1). ``spread = inf`` means ``W_E = s g`` (no shared direction).

    Args:
        dataset: the task; K: degree of σ; scales: embedding scales s; spreads: ε values;
        d: width; seed: random seed; coeffs: σ's ``C_1..C_K`` (default the monomial ``z^K``).

    Returns:
        float64 (len(scales), len(spreads), M+1): :func:`order_norm_ratios` over the dataset's tokens.
    """
    coeffs = np.eye(K)[K - 1] if coeffs is None else np.asarray(coeffs, dtype=np.float64)
    rng = np.random.default_rng(seed)
    u, G = rng.normal(size=d), rng.normal(size=(dataset.vocab_size, d))
    W_U = rng.normal(size=(dataset.vocab_size, d))
    out = []
    for s in scales:
        for eps in spreads:
            W_E = s * (G if np.isinf(eps) else u + eps * G)
            terms = cbow_label_terms(W_E, W_U, dataset.X, dataset.y, coeffs, tokens=dataset.tokens)
            out.append(order_norm_ratios(terms))
    return np.array(out).reshape(len(scales), len(spreads), -1)

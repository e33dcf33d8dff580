"""Order-by-order decomposition of the CBOW embedding gradient flow (SPEC §6.1, §6.2).

Model (SPEC §5): ``f(X) = W_U σ(h)``, ``h = Σ_i W_E[x_i]``, with the polynomial activation
``σ(z) = Σ_{k=1}^K C_k z^k`` (``coeffs[k-1] = C_k``, as for the ``poly`` activation of
:mod:`ctxstair.models`). Gradient flow on the **mean** loss splits (SPEC §1) into

    dW_E[α]/dt = label(α) − prediction(α),
    label(α)      = E_D[(∂f/∂w_α)^T e_y] = ∇_{w_α} mean_n f(X_n)[y_n],
    prediction(α) = E_D[(∂f/∂w_α)^T p(X)],

so every function here returns a *positive* gradient of its own expression, and the flow is
``label − prediction`` (equal to ``−∇ mean loss`` when ``p`` is the exact softmax). The prediction
part is expanded in the softmax at small logits, ``p ≈ 1/V + (1/V) H f`` with ``H = I − 11^T/V``:

    uniform part     E[(∂f/∂w_α)^T 1/V]       = ∇_{w_α} mean_n (1/V) Σ_ν f_n[ν]
    first correction E[(∂f/∂w_α)^T H f / V]   = ∇_{w_α} mean_n f_n^T H f_n / (2V)

How the orders arise. ``∂f/∂w_α = N_α(X) W_U Diag(σ'(h))`` and ``E[N_α G] = L r_α E[G | x_I = α]``.
Conditioned on an occurrence of ``α``, ``h = w_α + c`` with ``c = Σ_{j=1}^{L-1} w_{z_j}`` over the
context. Taylor-expanding in ``c`` (finite for a polynomial) and then ``c^s`` multinomially,

    σ'(w_α + c) = Σ_s σ^{(s+1)}(w_α) c^s / s!,
    c^s / s!    = Σ_{n_j >= 0, Σ n_j = s} Π_j w_{z_j}^{n_j} / n_j!      (coordinate-wise),

and grouping by the set of ``m`` context positions with ``n_j >= 1``. Averaging over which ``m``
positions (ordered distinct tuples, each unordered set counted ``m!`` times) turns the
conditional expectation into a contraction with the order-``m`` signature (SPEC §2):

    order-m label term = L r_α C(L−1, m) Σ_{n_1..n_m >= 1} σ^{(|n|+1)}(w_α) / Π_r n_r! ⊙
                         Σ_{ν, β} φ^{y;m}_α(ν, β_1..β_m) w^U_ν ⊙ Π_r w_{β_r}^{⊙ n_r}.

This is SPEC §6.1's ``L r_α 𝒜_{α,m} · φ^{y;m}_α``: ``σ^{(s+1)}(w_α) = Σ_k k C_k (k−1)!/(k−1−s)!
w_α^{k−1−s}``, so collecting the powers of ``w_α`` reproduces ``Σ_k k C_k 𝒲^{m,k}_α``. For the
correction, ``σ'(h)_i`` and ``σ(h)_j`` are expanded together (exponent pairs ``(a_r, b_r)`` per
context token), which reaches order ``min(L−1, 2K−1)``.

Everything is float64 numpy, vectorised over samples: the data enter only through the signatures
(:mod:`ctxstair.signatures`), and the loops run over orders and exponent compositions.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
from numpy.polynomial import polynomial as P

from ctxstair.checks import check_dense_size, check_id_subset, check_labels, check_sequences
from ctxstair.errors import InputError
from ctxstair.signatures import cooccurrence_signature, label_signature

__all__ = [
    "cbow_label_terms",
    "cbow_prediction_correction_terms",
    "cbow_prediction_terms",
    "correction_max_order",
    "label_max_order",
]

_LETTERS = "abcefghklmnopqrsuvwxyz"  # einsum letters for context axes (t, r, d, i, j are taken)


def label_max_order(L: int, K: int) -> int:
    """Highest order ``M = min(L−1, K−1)`` of the label-driven and uniform-prediction terms (SPEC §6.1)."""
    return min(L - 1, K - 1)


def correction_max_order(L: int, K: int) -> int:
    """Highest order ``M' = min(L−1, 2K−1)`` of the first softmax correction (SPEC §6.2)."""
    return min(L - 1, 2 * K - 1)


def cbow_label_terms(W_E: np.ndarray, W_U: np.ndarray, X: np.ndarray, y: np.ndarray, coeffs: Sequence[float],
                     tokens: np.ndarray | None = None) -> np.ndarray:
    """Order-m terms ``L r_α 𝒜_{α,m} · φ^{y;m}_α`` of the label-driven embedding flow (SPEC §6.1).

    Args:
        W_E, W_U: float (V, d) embedding and unembedding rows.
        X: int (n, L) input sequences; y: int (n,) labels.
        coeffs: ``(C_1..C_K)`` of ``σ(z) = Σ_k C_k z^k``.
        tokens: optional (T,) token ids α to compute (default all V).

    Returns:
        float64 (T, M+1, d), ``M = min(L−1, K−1)``; entry ``[t, m]`` is the order-m term of token
        ``tokens[t]``. The sum over ``m`` equals ``∇_{W_E[α]} mean_n f(X_n)[y_n]`` exactly (up to
        rounding). Tokens that never occur get zeros.

    Memory: the order-m signature is dense, ``T × (labels in y) × (ids in X)^m`` float64 entries;
    above the signatures' budget (2 GiB) :class:`~ctxstair.errors.TooLargeError` is raised before
    anything is allocated — pass fewer ``tokens``.
    """
    W_E, W_U, X, tokens, c = _check(W_E, W_U, X, coeffs, tokens)
    y = check_labels(y, X.shape[0], W_E.shape[0])
    labels, context = np.unique(y), np.unique(X)
    orders = range(label_max_order(X.shape[1], len(c) - 1) + 1)
    signatures = [label_signature(X, y, m, W_E.shape[0], tokens=tokens, labels=labels, context=context)
                  for m in orders]
    return _sigma_prime_terms(W_E, W_U[labels], signatures, X, c, tokens, context)


def cbow_prediction_terms(W_E: np.ndarray, W_U: np.ndarray, X: np.ndarray, coeffs: Sequence[float],
                          tokens: np.ndarray | None = None) -> np.ndarray:
    """Order-m terms of the prediction-induced flow with ``p`` replaced by uniform ``1/V`` (SPEC §6.2).

    The same expansion as :func:`cbow_label_terms` with ``w^U_ν`` replaced by
    ``b_0 = (1/V) Σ_ν w^U_ν`` (over all V rows) and ``φ^{y;m}_α`` by the co-occurrence signature
    ``φ^m_α``:

        L r_α C(L−1,m) Σ_n σ^{(|n|+1)}(w_α)/Π n_r! ⊙ b_0 ⊙ Σ_β φ^m_α(β) Π_r w_{β_r}^{n_r}.

    Args: as :func:`cbow_label_terms`, without labels.

    Returns:
        float64 (T, M+1, d), ``M = min(L−1, K−1)``; the sum over orders equals
        ``∇_{W_E[α]} mean_n (1/V) Σ_ν f(X_n)[ν]``. It enters the flow with a minus sign.
    """
    W_E, W_U, X, tokens, c = _check(W_E, W_U, X, coeffs, tokens)
    context = np.unique(X)
    orders = range(label_max_order(X.shape[1], len(c) - 1) + 1)
    # A label axis of length 1 carrying b_0: the label-driven expansion applies unchanged.
    signatures = [cooccurrence_signature(X, m, W_E.shape[0], tokens=tokens, context=context)[:, None]
                  for m in orders]
    return _sigma_prime_terms(W_E, W_U.mean(axis=0, keepdims=True), signatures, X, c, tokens, context)


def cbow_prediction_correction_terms(W_E: np.ndarray, W_U: np.ndarray, X: np.ndarray, coeffs: Sequence[float],
                                     tokens: np.ndarray | None = None) -> np.ndarray:
    """Order-m terms of the first softmax correction to the prediction-induced flow (SPEC §6.2).

    With ``p ≈ 1/V + (1/V) H f``, ``H = I − 11^T/V``, the correction is
    ``(1/V) E[N_α σ'(h) ⊙ Q σ(h)]`` with ``Q = W_U^T H W_U`` (d, d). Expanding ``σ'(h)_i`` and
    ``σ(h)_j`` around ``w_α`` with exponent pairs ``(a_r, b_r)``, ``a_r + b_r >= 1``, on the ``m``
    context tokens of an order-m term:

        L r_α C(L−1,m)/V Σ_{(a,b)} σ^{(|a|+1)}(w_α)_i Σ_j Q_ij σ^{(|b|)}(w_α)_j
            Σ_β φ^m_α(β) Π_r w_{β_r,i}^{a_r} w_{β_r,j}^{b_r} / (a_r! b_r!).

    Args: as :func:`cbow_prediction_terms`.

    Returns:
        float64 (T, M'+1, d), ``M' = min(L−1, 2K−1)``; the sum over orders equals
        ``∇_{W_E[α]} mean_n f_n^T H f_n / (2V)``. It enters the flow with a minus sign. Cost grows as
        ``T d² C^m`` per exponent pattern (C = number of context ids): meant for small d or V.
    """
    W_E, W_U, X, tokens, c = _check(W_E, W_U, X, coeffs, tokens)
    V, L, K = W_E.shape[0], X.shape[1], len(c) - 1
    context = np.unique(X)
    b0 = W_U.mean(axis=0)
    Q = W_U.T @ W_U - V * np.outer(b0, b0)  # W_U^T H W_U
    Wa, Wc = W_E[tokens], W_E[context]
    ones = np.ones(W_E.shape[1])
    out = np.zeros((tokens.size, correction_max_order(L, K) + 1, W_E.shape[1]))
    for m in range(out.shape[1]):
        phi = cooccurrence_signature(X, m, V, tokens=tokens, context=context)
        axes = _LETTERS[:m]
        for s in range(K):  # total exponent on the σ' side: σ^{(s+1)} vanishes for s >= K
            left = _derivative(c, s + 1, Wa)
            for t in range(K + 1):  # total exponent on the σ side
                U = np.zeros((tokens.size, W_E.shape[1], W_E.shape[1]))
                for a, b in _pair_compositions(s, t, m):
                    operands, subscripts = [phi, ones, ones], [f"t{axes}", "i", "j"]
                    for axis, ar, br in zip(axes, a, b):
                        for power, coord in ((ar, "i"), (br, "j")):
                            if power:
                                operands.append(Wc**power)
                                subscripts.append(axis + coord)
                    scale = math.prod(math.factorial(e) for e in a + b)
                    U += np.einsum(",".join(subscripts) + "->tij", *operands, optimize=True) / scale
                if U.any():
                    out[:, m] += math.comb(L - 1, m) * left * np.einsum("ij,tj,tij->ti", Q, _derivative(c, t, Wa), U)
    return out * (_occurrences_per_sample(X, tokens) / V)[:, None, None]


# --------------------------------------------------------------------------------------------
# Shared machinery
# --------------------------------------------------------------------------------------------


def _sigma_prime_terms(W_E: np.ndarray, readout: np.ndarray, signatures: list[np.ndarray], X: np.ndarray,
                       c: np.ndarray, tokens: np.ndarray, context: np.ndarray) -> np.ndarray:
    """Orders of ``E[N_α σ'(h) ⊙ Σ_ν (readout_ν weighted by the label axis)]`` (module docstring).

    ``readout``: (R, d) rows contracted with the signatures' label axis; ``signatures[m]``:
    (T, R, *[len(context)] * m). Returns (T, len(signatures), d).
    """
    L, K = X.shape[1], len(c) - 1
    Wa, Wc = W_E[tokens], W_E[context]
    out = np.zeros((tokens.size, len(signatures), W_E.shape[1]))
    for m, phi in enumerate(signatures):
        axes = _LETTERS[:m]
        # The label axis is contracted once per order rather than once per exponent pattern.
        check_dense_size((tokens.size, *phi.shape[2:], W_E.shape[1]), None, f"the order-{m} signature weighted by "
                         "the readout", "pass fewer tokens")
        weighted = np.tensordot(phi, readout, axes=([1], [0]))  # (T, C^m, d)
        subscripts = ",".join([f"t{axes}d"] + [f"{axis}d" for axis in axes]) + "->td"
        for s in range(m, K):  # total context exponent |n|; σ^{(s+1)} vanishes for s >= K
            inner = sum(np.einsum(subscripts, weighted, *(Wc**p for p in n), optimize=True)
                        / math.prod(math.factorial(p) for p in n)
                        for n in _compositions(s, m))
            out[:, m] += math.comb(L - 1, m) * _derivative(c, s + 1, Wa) * inner
    return out * _occurrences_per_sample(X, tokens)[:, None, None]


def _check(W_E, W_U, X, coeffs, tokens):
    """Validate the shared arguments; return float64 W_E, W_U, int X, tokens and σ's polynomial
    coefficients in numpy order ``(0, C_1..C_K)``."""
    W_E, W_U = np.asarray(W_E, dtype=np.float64), np.asarray(W_U, dtype=np.float64)
    if W_E.ndim != 2 or W_E.shape != W_U.shape:
        raise InputError(f"W_E and W_U must both have shape (V, d), got {W_E.shape} and {W_U.shape}")
    X = check_sequences(X, W_E.shape[0])
    tokens = check_id_subset(tokens, W_E.shape[0], "tokens")
    c = np.asarray(coeffs, dtype=np.float64)
    if c.ndim != 1 or c.size == 0 or not np.all(np.isfinite(c)):
        raise InputError(f"coeffs must be a non-empty list of finite numbers C_1..C_K, got {coeffs!r}")
    return W_E, W_U, X, tokens, np.concatenate([[0.0], c])


def _derivative(c: np.ndarray, order: int, Z: np.ndarray) -> np.ndarray:
    """``σ^{(order)}(Z)`` coordinate-wise for σ with numpy-order coefficients ``c``; same shape as Z."""
    return P.polyval(Z, P.polyder(c, order) if order else c)


def _occurrences_per_sample(X: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``L r_α = E[N_α(X)]`` (mean count per sample) for each token; (T,)."""
    return np.bincount(X.ravel(), minlength=int(tokens.max()) + 1)[tokens] / X.shape[0]


def _compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Ordered tuples of ``parts`` integers >= 1 summing to ``total`` (the empty tuple for 0, 0)."""
    if parts == 0:
        if total == 0:
            yield ()
        return
    for first in range(1, total - parts + 2):
        for rest in _compositions(total - first, parts - 1):
            yield (first, *rest)


def _weak_compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Ordered tuples of ``parts`` integers >= 0 summing to ``total``."""
    for n in _compositions(total + parts, parts):
        yield tuple(k - 1 for k in n)


def _pair_compositions(s: int, t: int, parts: int) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Exponent patterns ``(a, b)`` with ``Σ a = s``, ``Σ b = t`` and ``a_r + b_r >= 1`` for every r."""
    for a in _weak_compositions(s, parts):
        for b in _weak_compositions(t, parts):
            if all(ar + br for ar, br in zip(a, b)):
                yield a, b

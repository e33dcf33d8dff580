"""Superposing order-0 label signatures (SPEC §6.2, §8 S72): the prediction an early model makes by
adding the signatures of a sequence's tokens, and the closed forms of ``minmax``'s signatures."""

from __future__ import annotations

import numpy as np


def closed_form_signatures(N: int) -> np.ndarray:
    """SPEC §8 S72: order-0 label signatures of the ``minmax`` tokens 1..N, a, b over the labels 1..N,
    (N + 2, N): numbers ½·1{ν = x} + 1/(2N), anchor a (max) (2ν − 1)/N², anchor b (min) (2(N − ν) + 1)/N²."""
    nu = np.arange(1, N + 1)
    numbers = 0.5 * (nu[:, None] == nu[None, :]) + 1 / (2 * N)
    return np.vstack([numbers, (2 * nu - 1) / N**2, (2 * (N - nu) + 1) / N**2])


def superposition_scores(X: np.ndarray, tokens: np.ndarray, phi0: np.ndarray) -> np.ndarray:
    """Σ_i φ^{y;0}_{x_i}(ν) of every sample X (n, L): (n, labels), with ``phi0`` (T, labels) the rows of ``tokens``."""
    row = np.full(int(max(tokens.max(), X.max())) + 1, -1)
    row[tokens] = np.arange(tokens.size)
    return phi0[row[X]].sum(axis=1)

"""Principal components of per-token vectors, for side-by-side pictures of two geometries (SPEC §3)."""

from __future__ import annotations

import numpy as np

from ctxstair.errors import InputError


def pca(M: np.ndarray, n_components: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Project the rows of ``M`` on their top principal components (SPEC §3, "PCA of both spaces").

    Args:
        M: (n, ...) per-token vectors; trailing axes are flattened.
        n_components: k, at most ``min(n, features)``.

    Returns:
        ``(coords, explained)``: coords (n, k) of the centred rows, and the fraction of variance
        each component explains (k,). Each component's sign is fixed so that its largest-magnitude
        loading is positive, making pictures reproducible.
    """
    M = np.asarray(M, dtype=np.float64)
    if M.ndim < 2 or M.shape[0] < 2:
        raise InputError(f"M must have shape (n_tokens >= 2, features...), got {M.shape}")
    flat = M.reshape(M.shape[0], -1)
    if not 1 <= n_components <= min(flat.shape):
        raise InputError(f"n_components must be in 1..{min(flat.shape)}, got {n_components}")
    centred = flat - flat.mean(axis=0)
    _, s, vt = np.linalg.svd(centred, full_matrices=False)
    vt = vt[:n_components]
    signs = np.sign(vt[np.arange(n_components), np.abs(vt).argmax(axis=1)])
    vt = vt * np.where(signs == 0, 1.0, signs)[:, None]
    total = (s**2).sum()
    explained = (s[:n_components] ** 2) / total if total > 0 else np.zeros(n_components)
    return centred @ vt.T, explained

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


def pca_paths(E: np.ndarray) -> dict[str, np.ndarray]:
    """Two 2-D pictures of how per-token vectors move over training (SPEC §3 "PCA of both spaces"),
    for the explorer's scrubbable scatter.

    Each snapshot's rows are scaled to unit length (the cosine geometry that ``S^emb`` compares;
    small-initialization embeddings grow by orders of magnitude, which would otherwise swamp the
    picture) and centred.

    * ``fixed``: every snapshot projected on one basis, the top two principal directions of all
      snapshots' rows stacked, so that a change between frames is a change of the vectors;
    * ``procrustes``: each snapshot on its own top two components (:func:`pca`), then rotated or
      reflected (``scipy.linalg.orthogonal_procrustes``) onto the next snapshot's picture, the last
      snapshot as it is: every frame is its best 2-D view, without spurious spins between frames.

    Args:
        E: (S, n, d) float, S snapshots of n vectors, n >= 2, d >= 2.

    Returns:
        ``{"fixed": (S, n, 2), "procrustes": (S, n, 2), "basis": (d, 2)}`` — ``basis`` has
        orthonormal columns and ``fixed[s] = unit_centred(E[s]) @ basis``.
    """
    from scipy.linalg import orthogonal_procrustes

    E = np.asarray(E, dtype=np.float64)
    if E.ndim != 3 or E.shape[0] < 1 or E.shape[1] < 2 or E.shape[2] < 2:
        raise InputError(f"E must have shape (snapshots >= 1, n >= 2, d >= 2), got {E.shape}")
    norms = np.linalg.norm(E, axis=-1, keepdims=True)
    unit = np.divide(E, norms, out=np.zeros_like(E), where=norms > 0)
    centred = unit - unit.mean(axis=1, keepdims=True)
    _, _, vt = np.linalg.svd(centred.reshape(-1, E.shape[2]), full_matrices=False)
    basis = vt[:2].T * np.where(np.sign(vt[:2][[0, 1], np.abs(vt[:2]).argmax(axis=1)]) < 0, -1.0, 1.0)
    own = np.stack([pca(frame, 2)[0] for frame in centred])
    aligned = own.copy()
    for s in range(E.shape[0] - 2, -1, -1):
        rotation, _ = orthogonal_procrustes(own[s], aligned[s + 1])
        aligned[s] = own[s] @ rotation
    return {"fixed": centred @ basis, "procrustes": aligned, "basis": basis}

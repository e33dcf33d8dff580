"""Other comparisons of two geometries of the same tokens: linear CKA and top-k neighbours (SPEC §3);
the effective rank of one geometry (SPEC §8 F4, "collapsed embeddings")."""

from __future__ import annotations

import numpy as np

from ctxstair.checks import float_array, int_in_range, square_stack
from ctxstair.errors import InputError


def linear_cka(A: object, B: object) -> float:
    """Centred linear CKA (Kornblith et al., 2019) between two representations of the same n tokens (SPEC §3).

    ``CKA = <K_A, K_B>_F / (|K_A|_F |K_B|_F)`` with ``K = X_c X_c^T`` the Gram matrix of the
    column-centred rows. Invariant to orthogonal transforms and isotropic scaling of either side.

    Args:
        A: (n, ...) one row per token, trailing axes flattened (e.g. embeddings (n, d)).
        B: (n, ...) same n (e.g. a signature (n, V_labels[, P])).

    Returns:
        float in [0, 1]; NaN when either side has all rows equal (nothing to compare).
    """
    A, B = float_array(A, "A", min_ndim=2), float_array(B, "B", min_ndim=2)
    if A.shape[0] != B.shape[0] or A.shape[0] < 2:
        raise InputError(f"A and B must have the same number n >= 2 of rows, got shapes {A.shape} and {B.shape}")
    K_A, K_B = (_centred_gram(X.reshape(X.shape[0], -1)) for X in (A, B))
    denom = np.linalg.norm(K_A) * np.linalg.norm(K_B)
    return float(np.sum(K_A * K_B) / denom) if denom > 0 else float("nan")


def topk_overlap(S_a: object, S_b: object, k: int) -> float:
    """Mean over tokens of the shared fraction of their k nearest neighbours in two geometries (SPEC §3).

    Neighbours of ``i`` are the ``k`` other tokens with the largest similarity ``S[i, j]`` (``i``
    itself excluded); ties are broken in favour of the lower index.

    Args:
        S_a: (n, n) similarity matrix (e.g. a cosine matrix) of the tokens.
        S_b: (n, n) similarity matrix of the same tokens.
        k: neighbourhood size, 1..n−1.

    Returns:
        float in [0, 1]: ``mean_i |N_k^a(i) ∩ N_k^b(i)| / k``.
    """
    A, B = square_stack(S_a, "S_a"), square_stack(S_b, "S_b")
    if A.ndim != 2 or A.shape != B.shape:
        raise InputError(f"S_a and S_b must be (n, n) matrices of the same shape, got {A.shape} and {B.shape}")
    k = int_in_range("k", k, 1, A.shape[0] - 1)
    mask_a, mask_b = (_neighbour_mask(S, k) for S in (A, B))
    return float((mask_a & mask_b).sum(axis=1).mean() / k)


def effective_rank(M: object, centre: bool = False) -> float:
    """Effective rank (Roy & Vetterli, 2007) of the rows of M (n, d): ``exp(H(p))`` with
    ``p_i = s_i / Σ_j s_j`` the normalised singular values and ``H`` the Shannon entropy (SPEC §8 F4).

    1 for rows that are all multiples of one vector (collinear: "collapsed" embeddings), up to
    ``min(n, d)`` when all singular values are equal. ``centre=True`` subtracts the mean row first
    (then a shared drift does not count; the default does not centre, so that collinear embeddings
    that all moved along one direction read as rank ≈ 1).

    Args:
        M: (n, ...) one row per token (trailing axes flattened), e.g. embeddings W_E[tokens] (n, d).
        centre: subtract the mean row before the SVD.

    Returns:
        float in [1, min(n, d)]; NaN for an all-zero matrix.
    """
    M = float_array(M, "M", min_ndim=2)
    M = M.reshape(M.shape[0], -1)
    if centre:
        M = M - M.mean(axis=0)
    s = np.linalg.svd(M, compute_uv=False)
    if not s.sum() > 0:
        return float("nan")
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def _centred_gram(X: np.ndarray) -> np.ndarray:
    centred = X - X.mean(axis=0)
    return centred @ centred.T


def _neighbour_mask(S: np.ndarray, k: int) -> np.ndarray:
    """(n, n) bool, True at each row's k most similar other tokens."""
    S = S.copy()
    np.fill_diagonal(S, -np.inf)
    top = np.argsort(-S, axis=1, kind="stable")[:, :k]
    mask = np.zeros(S.shape, dtype=bool)
    np.put_along_axis(mask, top, True, axis=1)
    return mask

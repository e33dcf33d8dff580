"""Cosine matrices and their comparison on the strictly upper triangle (SPEC §3).

Conventions used by the whole package:

* **Zero rows.** A row of norm zero (a token that never occurs has an all-zero signature row,
  SPEC §2) has cosine similarity 0 with every row, *including itself*: its diagonal entry is 0,
  not 1. Mask such tokens with ``r_α > 0`` if they should not enter an alignment.
* **Pairs.** Alignments use the strictly upper triangle ``a < b`` in ``np.triu_indices(n, 1)``
  order: (0,1), (0,2), ..., (0,n-1), (1,2), ...
* **Constant sets.** A set of values counts as constant when its range (max − min) is at most
  ``rtol`` (default 1e-12) times its largest magnitude; an all-zero set is constant. A correlation
  with a constant set is undefined: it is reported as NaN with ``defined = False``, and
  ``one_minus_mse`` is the measure to read instead (SPEC §3).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

from ctxstair.checks import float_array, square_stack
from ctxstair.errors import InputError

#: Relative tolerance below which a set of values counts as constant.
CONSTANT_RTOL = 1e-12


def cosine_matrix(M: object) -> np.ndarray:
    """Cosine matrix ``S_ab = <M_a, M_b> / (|M_a| |M_b|)`` of the rows of ``M`` (SPEC §3).

    Args:
        M: (n, ...) one row per token; trailing axes are flattened.

    Returns:
        (n, n) float64. Rows of norm zero get similarity 0 with everything, including their own
        diagonal entry.
    """
    return _flat_cosine(M, "M")


def signature_cosine(sig: object) -> np.ndarray:
    """Signature geometry ``S^sig,(m)``: cosine matrix of per-token signatures (SPEC §3).

    Args:
        sig: (T, ...) a signature of T tokens, e.g. order 0 (T, V_labels) or order m
            (T, V_labels, P, ..., P); flattened over all trailing axes (over ``ν`` for order 0).

    Returns:
        (T, T) float64; a token that never occurs (all-zero row) has similarity 0 with every token,
        itself included.
    """
    return _flat_cosine(sig, "sig")


def mean_cosine(rows: object) -> float:
    """Mean pairwise cosine of the rows (n, ...) over the pairs a < b (SPEC §3): ≈ 0 for random rows,
    1 for rows along one direction."""
    return float(upper_triangle(cosine_matrix(rows)).mean())


def upper_triangle(S: object) -> np.ndarray:
    """Entries ``S[a, b]`` with ``a < b`` in ``np.triu_indices(n, 1)`` order: the pairs of SPEC §3.

    Args:
        S: (n, n) or a stack (..., n, n).

    Returns:
        (..., n(n-1)/2).
    """
    arr = square_stack(S, "S")
    rows, cols = np.triu_indices(arr.shape[-1], 1)
    return arr[..., rows, cols]


def compare(S_a: object, S_b: object, *, rtol: float = CONSTANT_RTOL) -> dict:
    """Alignment of two similarity matrices on their strictly upper triangles (SPEC §3).

    Args:
        S_a: (n, n) or a stack (..., n, n), e.g. embedding cosine matrices of S snapshots (S, n, n).
        S_b: (n, n) or a stack whose leading axes broadcast against those of ``S_a``.
        rtol: relative tolerance under which a triangle counts as constant (module docstring).

    Returns:
        dict with ``pearson``, ``spearman``, ``one_minus_mse`` (= 1 − mean((a − b)²), always
        defined) and ``defined`` (False when either triangle is constant; the two correlations are
        then NaN). Values are Python scalars for two single matrices, otherwise arrays of the
        broadcast leading shape.
    """
    A = square_stack(S_a, "S_a")  # S_a's problems are named first
    return Reference(S_b, rtol=rtol).compare(A)


class Reference:
    """One side of :func:`compare` prepared once: a similarity matrix (n, n) or a stack (..., n, n)
    whose strictly upper triangle is read and ranked here, not again for every matrix compared with
    it (a signature's cosine matrix against many snapshots, or at every step of a monitored run).
    ``Reference(S_b).compare(S_a)`` is ``compare(S_a, S_b)``, bit for bit (SPEC §3)."""

    def __init__(self, S: object, *, rtol: float = CONSTANT_RTOL):
        self.S = square_stack(S, "S_b")
        self.rtol = rtol
        self.triangle = upper_triangle(self.S)  # (..., n(n-1)/2)
        self.ranks = rankdata(self.triangle, axis=-1)

    def compare(self, S_a: object) -> dict:
        """:func:`compare` of ``S_a`` (n, n) or a stack (..., n, n) with this reference."""
        A, B = square_stack(S_a, "S_a"), self.S
        if A.shape[-1] != B.shape[-1]:
            raise InputError(f"S_a and S_b must be matrices of the same size, got shapes {A.shape} and {B.shape}")
        try:
            np.broadcast_shapes(A.shape, B.shape)
        except ValueError:
            raise InputError(f"the stacks S_a {A.shape} and S_b {B.shape} do not broadcast against each "
                             "other") from None
        triangle = upper_triangle(A)
        a, b = np.broadcast_arrays(triangle, self.triangle)
        pearson, defined = _pearson(a, b, self.rtol)
        rank_a, rank_b = np.broadcast_arrays(rankdata(triangle, axis=-1), self.ranks)
        spearman = np.where(defined, _pearson(rank_a, rank_b, self.rtol)[0], np.nan)
        result = {
            "pearson": pearson,
            "spearman": spearman,
            "one_minus_mse": 1.0 - np.mean((a - b) ** 2, axis=-1),
            "defined": defined,
        }
        return {key: _scalar_if_0d(value) for key, value in result.items()}


def permuted_pearson(S_a: object, S_b: object, permutations: object, *, rtol: float = CONSTANT_RTOL) -> np.ndarray:
    """Pearson r of the upper triangles of ``S_a[π][:, π]`` and ``S_b`` for each permutation π: a
    permutation null for :func:`compare`'s ``pearson`` (SPEC §3).

    Relabelling the rows and columns of a symmetric matrix together only moves its off-diagonal
    entries around, so the mean and spread of ``S_a``'s triangle are those of every permuted one and
    only the covariance with ``S_b`` is computed per permutation; no ranks.

    Args:
        S_a: (n, n) symmetric matrix, the one permuted.
        S_b: (n, n) symmetric matrix.
        permutations: int (P, n), each row a permutation of ``0..n-1``.
        rtol: constant-triangle tolerance as in :func:`compare`.

    Returns:
        (P,) float64; all NaN when either triangle is constant.
    """
    A, B = square_stack(S_a, "S_a"), square_stack(S_b, "S_b")
    perms = np.asarray(permutations)
    n = A.shape[-1]
    if A.ndim != 2 or A.shape != B.shape or not np.allclose(A, A.T) or not np.allclose(B, B.T):
        raise InputError(f"S_a and S_b must be symmetric matrices of the same size, got shapes {A.shape} and {B.shape}")
    if perms.ndim != 2 or perms.shape[1] != n or not np.array_equal(np.sort(perms, axis=1), np.broadcast_to(
            np.arange(n), perms.shape)):
        raise InputError(f"permutations must be an int array (P, {n}) whose rows permute 0..{n - 1}, "
                         f"got shape {perms.shape}")
    a, b = upper_triangle(A), upper_triangle(B)
    if _is_constant(a, rtol) or _is_constant(b, rtol):
        return np.full(perms.shape[0], np.nan)
    centred_b = np.zeros_like(B)
    rows, cols = np.triu_indices(n, 1)
    centred_b[rows, cols] = b - b.mean()
    a_c = A - a.mean()
    cov = np.einsum("pij,ij->p", a_c[perms[:, :, None], perms[:, None, :]], centred_b)
    r = cov / np.sqrt(((a - a.mean()) ** 2).sum() * ((b - b.mean()) ** 2).sum())
    return np.clip(r, -1.0, 1.0)


def partial_correlation(S_emb: object, S_1: object, S_0: object, *, rtol: float = CONSTANT_RTOL) -> float | np.ndarray:
    """Pearson partial correlation of ``S_emb`` with ``S_1`` controlling for ``S_0`` (SPEC §3).

    "Separating the orders": with ``S_1`` the order-1 signature similarity and ``S_0`` the order-0
    one, this is the part of the alignment with order 1 that order 0 does not already explain.
    Computed from the three pairwise Pearson correlations of the upper triangles (:func:`compare`):
    ``(r_e1 − r_e0 r_10) / sqrt((1 − r_e0²)(1 − r_10²))``.

    Args:
        S_emb: (n, n) or a stack (..., n, n) of embedding cosine matrices.
        S_1: (n, n) similarity matrix whose alignment is measured (or a broadcasting stack).
        S_0: (n, n) similarity matrix controlled for (or a broadcasting stack).
        rtol: constant-triangle tolerance passed to :func:`compare`.

    Returns:
        float (or array of the leading shape); NaN when any correlation is undefined or when ``S_1``
        or ``S_emb`` is perfectly correlated with ``S_0`` (nothing is left after controlling for it).
    """
    r_e1 = np.asarray(compare(S_emb, S_1, rtol=rtol)["pearson"])
    r_e0 = np.asarray(compare(S_emb, S_0, rtol=rtol)["pearson"])
    r_10 = np.asarray(compare(S_1, S_0, rtol=rtol)["pearson"])
    return _scalar_if_0d(_partial_from(r_e1, r_e0, r_10))


def permuted_partial_correlation(S_emb: object, S_1: object, S_0: object, permutations: object, *,
                                 rtol: float = CONSTANT_RTOL) -> np.ndarray:
    """:func:`partial_correlation` of ``S_emb[π][:, π]`` with ``S_1`` controlling for ``S_0`` for each
    permutation π: a permutation null for the partialled alignment (SPEC §3). ``S_1`` and ``S_0`` stay
    in place, so their correlation is computed once.

    Args:
        S_emb: (n, n) symmetric matrix, the one permuted.
        S_1: (n, n) symmetric matrix.
        S_0: (n, n) symmetric matrix controlled for.
        permutations: int (P, n), as :func:`permuted_pearson`.
        rtol: constant-triangle tolerance as in :func:`compare`.

    Returns:
        (P,) float64, NaN where :func:`partial_correlation` would be.
    """
    r_e1 = permuted_pearson(S_emb, S_1, permutations, rtol=rtol)
    r_e0 = permuted_pearson(S_emb, S_0, permutations, rtol=rtol)
    return _partial_from(r_e1, r_e0, np.asarray(compare(S_1, S_0, rtol=rtol)["pearson"]))


def _partial_from(r_e1: np.ndarray, r_e0: np.ndarray, r_10: np.ndarray) -> np.ndarray:
    """``(r_e1 − r_e0 r_10) / sqrt((1 − r_e0²)(1 − r_10²))``, clipped to [−1, 1]; NaN where the
    denominator vanishes (nothing is left after controlling for the third matrix)."""
    denom = np.sqrt((1 - r_e0**2) * (1 - r_10**2))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(denom > 1e-12, (r_e1 - r_e0 * r_10) / denom, np.nan)
    return np.clip(out, -1.0, 1.0)


def _flat_cosine(M: object, name: str) -> np.ndarray:
    arr = float_array(M, name, min_ndim=2)
    return stacked_cosines(arr.reshape(arr.shape[0], -1))


def stacked_cosines(M: np.ndarray) -> np.ndarray:
    """Cosine matrices of stacked row sets: (..., n, d) -> (..., n, n); zero rows give zeros."""
    norms = np.linalg.norm(M, axis=-1, keepdims=True)
    unit = np.divide(M, norms, out=np.zeros_like(M), where=norms > 0)
    return unit @ np.swapaxes(unit, -1, -2)


def _is_constant(x: np.ndarray, rtol: float) -> np.ndarray:
    """True where the values along the last axis span at most ``rtol`` times their largest magnitude."""
    return np.ptp(x, axis=-1) <= rtol * np.abs(x).max(axis=-1)


def _pearson(a: np.ndarray, b: np.ndarray, rtol: float) -> tuple[np.ndarray, np.ndarray]:
    """Pearson r along the last axis and whether it is defined (neither side constant); r is NaN if not."""
    defined = ~(_is_constant(a, rtol) | _is_constant(b, rtol))
    ac = a - a.mean(axis=-1, keepdims=True)
    bc = b - b.mean(axis=-1, keepdims=True)
    denom = np.sqrt((ac**2).sum(axis=-1) * (bc**2).sum(axis=-1))
    r = (ac * bc).sum(axis=-1) / np.where(defined, denom, 1.0)
    return np.where(defined, np.clip(r, -1.0, 1.0), np.nan), defined


def _scalar_if_0d(x: np.ndarray):
    """Python scalar for a 0-d array, the array otherwise."""
    x = np.asarray(x)
    return x.item() if x.ndim == 0 else x

"""Fourier view of the order-1 signature: alignment per cosine frequency over context tokens (SPEC §3).

With ``P`` context tokens in their natural order (e.g. the numbers 1..N), the probe vectors
``c_k(j) = cos(2πkj/P)``, ``j = 0..P−1``, ``k = 0..P//2`` give ``h_{α,k} = φ1[α] @ c_k``. Since
``c_0 = 1`` and the signature hierarchy is marginally consistent, ``k = 0`` recovers the order-0
signature up to scale when the P context tokens are all the tokens that occur in contexts (for a
subset, ``Σ_β φ1[α, ν, β] = P(y = ν, x_J ∈ subset | x_I = α)``). Tasks
built on a frequency (``add`` ↔ ``k = N/2``, ``mod`` ↔ its ring step) light up at that ``k``.
"""

from __future__ import annotations

import numpy as np

from ctxstair.alignment.similarity import compare, stacked_cosines
from ctxstair.checks import phi1_array, snapshots
from ctxstair.errors import InputError


def fourier_signatures(phi1: object, ks: object = None) -> np.ndarray:
    """Project an order-1 label signature on cosine probes over its context axis (SPEC §3).

    Args:
        phi1: (T, V_labels, P) order-1 label signature restricted to P ordered context tokens.
        ks: frequencies, integers in 0..P//2; default all of them.

    Returns:
        (len(ks), T, V_labels) with entry ``[i, α] = φ1[α] @ c_{ks[i]}``.
    """
    phi = phi1_array(phi1)
    ks = _frequencies(ks, phi.shape[2])
    basis = np.cos(2 * np.pi * np.outer(ks, np.arange(phi.shape[2])) / phi.shape[2])  # (n_k, P)
    return np.einsum("tlp,kp->ktl", phi, basis)


def fourier_alignment(phi1: object, embeddings: object, ks: object = None) -> dict:
    """Alignment ``ρ_(1),k`` of every frequency's signature geometry with every snapshot (SPEC §3).

    Args:
        phi1: (T, V_labels, P), as for :func:`fourier_signatures`.
        embeddings: (T, d) embedding rows of the same tokens, or snapshots (S, T, d).
        ks: frequencies, integers in 0..P//2; default all of them.

    Returns:
        dict with ``ks`` (n_k,) and, each of shape (S, n_k) (S = 1 for a single matrix), the
        :func:`compare` keys ``pearson``, ``spearman``, ``one_minus_mse`` and ``defined`` between
        ``cosine_matrix(h_k)`` and the snapshot's embedding cosine matrix. Heatmap over (snapshot, k).
    """
    phi = phi1_array(phi1)
    emb = snapshots(embeddings, phi.shape[0])
    ks = _frequencies(ks, phi.shape[2])
    S_sig = stacked_cosines(fourier_signatures(phi, ks))  # (n_k, T, T)
    result = compare(stacked_cosines(emb)[:, None], S_sig[None])
    return {"ks": ks, **{key: np.asarray(value) for key, value in result.items()}}


def _frequencies(ks: object, n_context: int) -> np.ndarray:
    """Check frequencies: a non-empty 1-D list of integers in 0..P//2 (default: all of them)."""
    if ks is None:
        return np.arange(n_context // 2 + 1)
    arr = np.atleast_1d(np.asarray(ks))
    if arr.dtype.kind not in "iu" or arr.ndim != 1 or arr.size == 0 or arr.min() < 0 or arr.max() > n_context // 2:
        raise InputError(
            f"ks must be a non-empty 1-D list of integers in 0..{n_context // 2} (P={n_context}), got {ks!r}"
        )
    return arr.astype(np.int64)

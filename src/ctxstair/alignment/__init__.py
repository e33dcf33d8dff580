"""Similarity and alignment between embedding and signature geometry (SPEC §3).

* :mod:`~ctxstair.alignment.similarity` — ``cosine_matrix``, ``signature_cosine``, ``upper_triangle``,
  ``compare`` (Pearson / Spearman / 1 − MSE on the strictly upper triangle),
  ``partial_correlation`` (order 1 beyond order 0).
* :mod:`~ctxstair.alignment.probe` — ``probe_alignment``: the order-1 probe, fitted with
  cross-validation over token pairs; only held-out scores are reported.
* :mod:`~ctxstair.alignment.fourier` — ``fourier_signatures``, ``fourier_alignment``: the
  alignment per cosine frequency ``k`` over context tokens.
* :mod:`~ctxstair.alignment.distributions` — ``distribution_match``: predicted vs data label law.
* :mod:`~ctxstair.alignment.geometry` — ``linear_cka``, ``topk_overlap``, ``effective_rank``.
* :mod:`~ctxstair.alignment.pca` — ``pca`` for side-by-side pictures.

Conventions: a zero row (a token that never occurs) has cosine 0 with every row, its own diagonal
included; a correlation with a constant triangle is NaN with ``defined = False``, and
``one_minus_mse`` is reported instead (see :mod:`~ctxstair.alignment.similarity`).

Example::

    S0 = signature_cosine(phi0)                       # (T, T) order-0 signature geometry
    rho = compare(cosine_matrix(W_E[tokens]), S0)     # {'pearson', 'spearman', 'one_minus_mse', 'defined'}
    probe = probe_alignment(phi1, snapshots)          # snapshots (S, T, d) -> probe.heldout_pearson (S,)
"""

from ctxstair.alignment.distributions import distribution_match
from ctxstair.alignment.fourier import fourier_alignment, fourier_signatures
from ctxstair.alignment.geometry import effective_rank, linear_cka, topk_overlap
from ctxstair.alignment.pca import pca
from ctxstair.alignment.probe import ProbeResult, probe_alignment
from ctxstair.alignment.similarity import (
    Reference,
    compare,
    cosine_matrix,
    mean_cosine,
    partial_correlation,
    permuted_partial_correlation,
    permuted_pearson,
    signature_cosine,
    upper_triangle,
)

__all__ = [
    "ProbeResult",
    "Reference",
    "compare",
    "cosine_matrix",
    "distribution_match",
    "effective_rank",
    "fourier_alignment",
    "fourier_signatures",
    "linear_cka",
    "mean_cosine",
    "partial_correlation",
    "permuted_partial_correlation",
    "permuted_pearson",
    "pca",
    "probe_alignment",
    "signature_cosine",
    "topk_overlap",
    "upper_triangle",
]

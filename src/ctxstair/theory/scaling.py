"""Low-order dominance at initialization (SPEC §6.2): how the order-m label-driven term shrinks
relative to order 0 as the width d grows under γ-initialization.

Prediction. With every entry of ``W_E`` and ``W_U`` of size ``d^{−γ}`` (SPEC §4), the degree-k
part of the label-driven term (``k C_k`` times a product of one ``W_U`` row and ``k−1`` ``W_E``
rows, coordinate-wise) has coordinates of size ``d^{−kγ}`` and norm ``d^{1/2−kγ}``. Order m first
appears at degree ``k = m+1``, so ``RMS(order m) / RMS(order 0) ∝ d^{−mγ}``: slope ``−mγ`` against
``log d`` — provided ``C_1`` and ``C_{m+1}`` are non-zero. In general the leading degree of order m
is ``k_m = min{k >= m+1 : C_k != 0}`` and the slope is ``−(k_m − k_0)γ`` (:func:`predicted_slope`);
e.g. for an odd σ (tanh, ``C_2 = 0``) order 1 has slope ``−2γ``, and for a fit of ReLU or GELU
(linear plus even part, ``C_3 = 0``) order 2 has slope ``−3γ``; for a monomial every order has the
same degree and the slope is 0. The ratio is the same whether the RMS is taken over coordinates or over per-token norms
(both numerator and denominator are d-vectors, the ``d^{1/2}`` cancels); mixing the two would shift
the slope by ``±1/2``. Corrections come from the next degrees: degrees ``m+1`` and ``m+2`` have an
odd total number of Gaussian factors in their product, so their cross term averages to zero and
the first correction to ``RMS²`` is relatively ``O(d^{−2γ})``. Its constant can be large: the
next-degree term contains even powers ``w_β^{⊙2}`` whose sum over context tokens is coherent
(mean ``d^{−2γ}``) while the leading term is a sum of random signs, so at ``γ = 0.6`` and
``d <= 128`` the local slope is visibly off (docs/theory.md); at ``γ >= 0.8`` it is not.

Measurement: for each γ and d, ``seeds`` initializations exactly as a training run with the default
``train.dtype = float32`` draws them (:class:`ctxstair.models.CBOWEnsemble`, seeds
``seed..seed+seeds−1``), then cast to float64; per member the mean square
of each order term over the dataset's tokens and all coordinates; the RMS over seeds is the square
root of the mean of those; the slope of ``log(RMS_m / RMS_0)`` against ``log d`` is fitted by least
squares with a t-based confidence interval (``stderr × t_{(1+c)/2, n_d − 2}``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy import stats

from ctxstair.errors import InputError
from ctxstair.models import CBOWEnsemble, MemberSpec
from ctxstair.tasks import Dataset
from ctxstair.theory.cbow_terms import cbow_label_terms

__all__ = ["SlopeFit", "fit_order_slopes", "init_order_mean_squares", "order_rms_ratios", "predicted_slope"]


def predicted_slope(order: int, coeffs: Sequence[float], gamma: float) -> float:
    """Predicted slope of ``log(RMS_m / RMS_0)`` against ``log d`` at initialization (SPEC §6.2).

    ``−(k_m − k_0)γ`` with ``k_m = min{k >= m+1 : C_k != 0}`` the leading degree of order m;
    ``−mγ`` when ``C_1`` and ``C_{m+1}`` are non-zero. NaN when order m (or order 0) vanishes.

    Args: order m >= 0; coeffs ``C_1..C_K``; gamma γ.
    """
    degrees = np.flatnonzero(np.asarray(coeffs, dtype=np.float64)) + 1
    lead = [degrees[degrees >= m + 1] for m in (0, order)]
    return float("nan") if not all(x.size for x in lead) else -float(lead[1][0] - lead[0][0]) * float(gamma)


def init_order_mean_squares(dataset: Dataset, d_values: Sequence[int], gammas: Sequence[float], seeds: int,
                            coeffs: Sequence[float], seed: int = 0) -> np.ndarray:
    """Mean square of each label-driven order term at γ-initialization (SPEC §6.2).

    Args:
        dataset: the task (its ``tokens`` are the tokens averaged over).
        d_values: widths d; gammas: γ values (W_E and W_U both std ``d^{−γ}``, SPEC §4).
        seeds: number of initializations per (γ, d), seeds ``seed..seed+seeds−1``.
        coeffs: ``C_1..C_K`` of the polynomial activation.

    Returns:
        float64 (len(gammas), len(d_values), seeds, M+1), ``M = min(L−1, K−1)``: the mean over tokens
        and coordinates of the squared order-m term (:func:`cbow_label_terms`) of each member.
    """
    if seeds < 1 or not len(d_values) or not len(gammas):
        raise InputError("init_order_mean_squares needs seeds >= 1 and at least one d and one γ")
    out = []
    for gamma in gammas:
        for d in d_values:
            members = [MemberSpec(seed + s, int(d), float(gamma), float(gamma)) for s in range(seeds)]
            # float32 draws, as a training run with the default train.dtype makes them; terms in float64
            model = CBOWEnsemble(dataset.vocab_size, members, activation="poly", coeffs=coeffs, dtype=torch.float32)
            for W_E, W_U in zip(model.W_E.detach().double().numpy(), model.W_U.detach().double().numpy()):
                terms = cbow_label_terms(W_E, W_U, dataset.X, dataset.y, coeffs, tokens=dataset.tokens)
                out.append((terms**2).mean(axis=(0, 2)))
    return np.array(out).reshape(len(gammas), len(d_values), seeds, -1)


def order_rms_ratios(mean_squares: np.ndarray) -> np.ndarray:
    """``RMS_m / RMS_0`` with the RMS over seeds: (..., seeds, M+1) mean squares -> (..., M+1)."""
    rms = np.sqrt(np.asarray(mean_squares).mean(axis=-2))
    return rms / rms[..., :1]


@dataclass(frozen=True)
class SlopeFit:
    """Fitted slope of ``log(RMS_m / RMS_0)`` against ``log d`` (SPEC §6.2) and its prediction
    (:func:`predicted_slope`; ``−mγ`` when every C_k is non-zero). NaN fields for a vanishing order."""

    order: int
    gamma: float
    slope: float
    stderr: float
    ci_low: float
    ci_high: float
    intercept: float
    predicted: float
    confidence: float

    def within(self, tolerance: float) -> bool:
        """Whether the fitted slope lies within ``tolerance`` of the prediction."""
        return abs(self.slope - self.predicted) <= tolerance


def fit_order_slopes(d_values: Sequence[int], ratios: np.ndarray, gamma: float, coeffs: Sequence[float],
                     confidence: float = 0.95) -> list[SlopeFit]:
    """Least-squares slopes of ``log ratios[:, m]`` against ``log d`` for every order m >= 1.

    Args:
        d_values: (n_d,) widths, n_d >= 3 (a confidence interval needs a residual degree of freedom).
        ratios: (n_d, M+1) ``RMS_m / RMS_0`` (:func:`order_rms_ratios`).
        gamma, coeffs: the γ and activation of these ratios (for the prediction).
        confidence: level of the t-based interval ``slope ± stderr · t_{(1+c)/2, n_d−2}``.

    Returns:
        one :class:`SlopeFit` per order ``m = 1..M``.
    """
    log_d = np.log(np.asarray(d_values, dtype=np.float64))
    ratios = np.asarray(ratios, dtype=np.float64)
    if log_d.size < 3 or ratios.shape[0] != log_d.size:
        raise InputError(f"fit_order_slopes needs >= 3 widths and one row of ratios per width, got {log_d.size} "
                         f"widths and ratios of shape {ratios.shape}")
    t = stats.t.ppf((1 + confidence) / 2, log_d.size - 2)
    fits = []
    for m in range(1, ratios.shape[1]):
        predicted = predicted_slope(m, coeffs, gamma)
        if not np.all(ratios[:, m] > 0):  # a vanishing order (some C_k = 0): nothing to fit
            nan = float("nan")
            fits.append(SlopeFit(m, float(gamma), nan, nan, nan, nan, nan, predicted, confidence))
            continue
        line = stats.linregress(log_d, np.log(ratios[:, m]))
        fits.append(SlopeFit(order=m, gamma=float(gamma), slope=float(line.slope), stderr=float(line.stderr),
                             ci_low=float(line.slope - t * line.stderr), ci_high=float(line.slope + t * line.stderr),
                             intercept=float(line.intercept), predicted=predicted, confidence=confidence))
    return fits

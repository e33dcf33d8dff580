"""Order-m similarity through a fitted linear probe, scored on held-out token pairs (SPEC §3).

An order-1 label signature restricted to P context tokens gives each token ``α`` a matrix
``φ1[α] ∈ R^{V_labels × P}``; a probe vector ``v ∈ R^P`` turns it into ``h_α(v) = φ1[α] @ v``. The
probe ``v`` is fitted to make the cosine matrix of ``h(v)`` correlate (Pearson, upper triangle) with
the embedding cosine matrix. A fitted probe can only look better on the pairs it was fitted on, so
only **held-out** scores are reported: token pairs are split into folds, ``v`` is fitted on all
folds but one and scored on the remaining one, and the training score is never returned.

**Order m ≥ 2** (beyond the paper's order 1; SPEC §8 row C). An order-m signature
``φm[α] ∈ R^{V_labels × P × … × P}`` has m context indices; the probe contracts each with its own
vector, ``h_α = φm[α] ×_2 v_1 ×_3 v_2 … ×_{m+1} v_m`` — for order 2, ``h_α(ν) = Σ_{β,β'}
φ2[α](ν, β, β') v_1(β) v_2(β')``, a bilinear form with two vectors rather than the quadratic form
``v ⊗ v`` of one. Why two: by marginal consistency (SPEC §2) ``v_1 = 1`` gives ``φ1[α] @ v_2``, so
the order-2 family contains every order-1 probe, as the order-1 family (``v = 1``) contains order
0; with one vector ``v ⊗ v`` it would not. (Label signatures are symmetric in their context
indices, so the order of ``v_1, v_2`` does not matter.) Hence, fitted perfectly, the order-2 score
is at least the order-1 score, and the comparison of interest is by how much it is higher.

**Two fits of the same Adam run.** ``method="fast"`` (the default) runs the order-1 fit in float32
with the gradient of the Pearson r written out in closed form (:func:`_order1_gradient`), 4–5 times
faster than ``method="reference"``, which differentiates the float64 forward pass with autograd.
Both start from the same probes and take the same Adam steps, so they differ by rounding only
(held-out scores within 5e-4 on every snapshot of the paper recipes' runs; tests compare them). Order m ≥ 2 is
always fitted by the reference path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ctxstair.alignment.similarity import CONSTANT_RTOL, stacked_cosines, upper_triangle
from ctxstair.checks import float_array, int_in_range, positive_float, snapshots
from ctxstair.errors import InputError


@dataclass(frozen=True)
class ProbeResult:
    """Held-out result of :func:`probe_alignment` (SPEC §3; never the training score).

    Attributes:
        heldout_pearson: (S,) mean over folds of the held-out Pearson r, one per snapshot; NaN if
            any fold's held-out pairs are constant on either side.
        heldout_pearson_per_fold: (S, folds) Pearson r on each fold's held-out pairs.
        v: (S, folds, P) the probe fitted without fold ``f`` (already projected to zero mean when
            ``zero_mean=True``), so ``φ1 @ v[s, f]`` reproduces the scored ``h``; for an order-m
            signature with m ≥ 2, (S, folds, m, P): the vectors ``v_1..v_m``.
        pair_folds: (n_pairs,) fold index of each token pair ``a < b``, pairs in
            ``np.triu_indices(T, 1)`` order (as :func:`~ctxstair.alignment.upper_triangle`).
    """

    heldout_pearson: np.ndarray
    heldout_pearson_per_fold: np.ndarray
    v: np.ndarray
    pair_folds: np.ndarray

    def __repr__(self) -> str:
        """One line: the sizes and the held-out Pearson r per snapshot (first and last three)."""
        r = [f"{x:.3f}" for x in np.asarray(self.heldout_pearson, dtype=float)]
        shown = r if len(r) <= 6 else [*r[:3], "…", *r[-3:]]
        return (f"ProbeResult({len(r)} snapshots × {self.heldout_pearson_per_fold.shape[-1]} folds, "
                f"{len(self.pair_folds)} pairs, v {tuple(self.v.shape)}; held-out Pearson r: {', '.join(shown)})")


def probe_alignment(
    phi: object,
    embeddings: object,
    *,
    folds: int = 5,
    steps: int = 300,
    lr: float = 0.01,
    seed: int = 0,
    zero_mean: bool = False,
    init_var: float | None = None,
    restarts: int = 1,
    method: str = "fast",
    on_step: Callable[[], None] | None = None,
) -> ProbeResult:
    """Fit the order-1 (or order-m) probe at every snapshot; report its cross-validated Pearson r (SPEC §3).

    Token pairs ``a < b`` are shuffled with ``seed`` and dealt into ``folds`` folds. For every
    (snapshot, fold) a probe ``v`` is fitted by Adam to maximise the Pearson r, over the pairs of
    the other folds, between the upper triangles of ``cosine_matrix(φ1 @ v)`` and of the snapshot's
    embedding cosine matrix; it is scored on the fold's own pairs. All fits run as one float64
    torch optimisation over parameters (S, folds, restarts, m, P) with loss Σ −r; the loss is
    separable, so this equals independent fits. The initial probes are drawn once per (fold,
    restart), N(0, init_var) for each of the m vectors, and shared by all snapshots, so fitting one
    snapshot alone gives the same result. An order-m signature (m ≥ 2) is probed with m vectors,
    one per context index (module docstring). The objective is not concave: from a single start a
    fit can stall in a local optimum (on random synthetic signatures with an exact probe, about one
    fold in six); ``restarts > 1`` keeps, per (snapshot, fold), the start with the best *training*
    score.

    Args:
        phi: (T, V_labels, P) order-1 label signature of T tokens restricted to P context tokens,
            or an order-m one (T, V_labels, P, ..., P) with m context axes.
        embeddings: (T, d) embedding rows of the same tokens, or snapshots (S, T, d).
        folds: number of folds, 2..T(T−1)/2 (paper: 5).
        steps: Adam steps (paper: 300).
        lr: Adam learning rate (paper: 0.01).
        seed: seeds the pair split and the initial probes (torch.Generator); deterministic on CPU.
        zero_mean: fit ``v ⟂ 1`` (projected to zero mean inside the forward pass). Since ``v ∝ 1``
            reproduces the order-0 signature, this measures what order 1 adds beyond order 0. For
            order m every vector is projected.
        init_var: variance of the initial entries of every vector; default ``P**-0.5`` (paper), i.e.
            standard deviation ``P**-0.25``.
        restarts: random starts per (snapshot, fold), >= 1 (paper: 1). The choice among them uses
            training pairs only, so the held-out score stays honest.
        method: ``fast`` or ``reference`` (module docstring); scoring is float64 in both.
        on_step: called after each of the ``steps`` Adam steps (progress; it changes nothing fitted).

    Returns:
        :class:`ProbeResult` with S = 1 for a single (T, d) embedding matrix.
    """
    phi = _signature_array(phi)
    emb = snapshots(embeddings, phi.shape[0])
    n_tokens, n_context, order = phi.shape[0], phi.shape[-1], phi.ndim - 2
    n_pairs = n_tokens * (n_tokens - 1) // 2
    folds = int_in_range("folds", folds, 2, n_pairs)
    steps = int_in_range("steps", steps, 0)
    lr = positive_float(lr, "lr")
    restarts = int_in_range("restarts", restarts, 1)
    if method not in ("fast", "reference"):
        raise InputError(f"unknown probe method {method!r}; allowed: fast, reference")
    init_std = np.sqrt(n_context**-0.5 if init_var is None else positive_float(init_var, "init_var"))

    gen = torch.Generator().manual_seed(int(seed))
    pair_folds, heldout = _deal_pairs(n_pairs, folds, gen)
    v0 = torch.randn(folds, restarts, order, n_context, generator=gen, dtype=torch.float64) * init_std

    phi_t = torch.from_numpy(phi)
    target = torch.from_numpy(upper_triangle(stacked_cosines(emb)))[:, None, None, :]  # (S, 1, 1, n_pairs)
    rows, cols = torch.triu_indices(n_tokens, n_tokens, 1)
    start = v0.expand(emb.shape[0], -1, -1, -1, -1)
    fit = _fit_order1_fast if method == "fast" and order == 1 else _fit_probes
    v = fit(phi_t, target, 1.0 - heldout, start, rows, cols, zero_mean, steps, lr,
            on_step or (lambda: None))  # (S, folds, 1, m, P)
    with torch.no_grad():
        tri = _probe_triangle(phi_t, v, rows, cols)
        scores = _weighted_pearson(tri, target, heldout, undefined_as_nan=True)[..., 0].numpy()
        v = v[:, :, 0, 0].numpy() if order == 1 else v[:, :, 0].numpy()
    return ProbeResult(heldout_pearson=scores.mean(axis=1), heldout_pearson_per_fold=scores, v=v,
                       pair_folds=pair_folds.numpy())


def _deal_pairs(n_pairs: int, folds: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Shuffle the token pairs with ``gen`` and deal them into ``folds`` folds: the (n_pairs,) fold of each
    pair and the (folds, 1, n_pairs) 0/1 masks of each fold's held-out pairs."""
    pair_folds = torch.empty(n_pairs, dtype=torch.long)
    pair_folds[torch.randperm(n_pairs, generator=gen)] = torch.arange(n_pairs) % folds
    return pair_folds, (pair_folds == torch.arange(folds)[:, None]).double()[:, None, :]


def _fit_probes(phi: torch.Tensor, target: torch.Tensor, train: torch.Tensor, start: torch.Tensor, rows: torch.Tensor,
                cols: torch.Tensor, zero_mean: bool, steps: int, lr: float,
                on_step: Callable[[], None]) -> torch.Tensor:
    """Fit probes from ``start`` (S, folds, R, m, P) by Adam to maximise the Pearson r with ``target`` on the
    ``train`` pairs, calling ``on_step()`` after each step; return, per (snapshot, fold), the (projected)
    probe of the restart with the best training r, (S, folds, 1, m, P)."""
    project = (lambda v: v - v.mean(dim=-1, keepdim=True)) if zero_mean else (lambda v: v)

    def train_pearson(v: torch.Tensor) -> torch.Tensor:
        """(S, folds, R, m, P) probes -> (S, folds, R) Pearson r on the training pairs."""
        return _weighted_pearson(_probe_triangle(phi, project(v), rows, cols), target, train)

    param = start.clone().requires_grad_(True)
    optimizer = torch.optim.Adam([param], lr=lr)
    fittable = ~_is_constant(target, train)  # (S, folds, 1): a constant target leaves nothing to fit
    for _ in range(steps):
        optimizer.zero_grad()
        (-(train_pearson(param) * fittable).sum()).backward()
        optimizer.step()
        on_step()
    return _best_restart(phi, target, train, project(param.detach()), rows, cols)


def _best_restart(phi: torch.Tensor, target: torch.Tensor, train: torch.Tensor, v: torch.Tensor, rows: torch.Tensor,
                  cols: torch.Tensor) -> torch.Tensor:
    """Per (snapshot, fold), the fitted probe (S, folds, R, m, P) of the restart with the best training r, as
    (S, folds, 1, m, P); the choice uses training pairs only."""
    with torch.no_grad():
        best = _weighted_pearson(_probe_triangle(phi, v, rows, cols), target, train).argmax(dim=-1)
        return v.take_along_dim(best[..., None, None, None], dim=2)


def _fit_order1_fast(phi: torch.Tensor, target: torch.Tensor, train: torch.Tensor, start: torch.Tensor,
                     rows: torch.Tensor, cols: torch.Tensor, zero_mean: bool, steps: int, lr: float,
                     on_step: Callable[[], None]) -> torch.Tensor:
    """:func:`_fit_probes` for order 1 in float32 with the closed-form gradient of :func:`_order1_gradient`:
    the same Adam steps from the same start (S, folds, R, 1, P); returns (S, folds, 1, 1, P) float64."""
    n_tokens, n_labels, n_context = phi.shape
    Phi = phi.float().reshape(n_tokens * n_labels, n_context)
    # Each training pair on both sides of the diagonal: the Pearson r over the weighted full matrix equals
    # the r over the triangle, and the matrices need no gather or scatter.
    weights = torch.zeros(train.shape[0], n_tokens, n_tokens)
    weights[:, rows, cols] = train[:, 0].float()
    weights = (weights + weights.mT)[None, :, None]  # (1, folds, 1, T, T)
    full = torch.zeros(target.shape[0], n_tokens, n_tokens, dtype=torch.float64)
    full[:, rows, cols] = target[:, 0, 0]
    full = (full + full.mT).float()[:, None, None]  # (S, 1, 1, T, T); the diagonal carries no weight
    count = weights.sum(dim=(-2, -1))
    centred = full - ((weights * full).sum(dim=(-2, -1)) / count)[..., None, None]
    weighted_target = weights * centred
    target_var = (weighted_target * centred).sum(dim=(-2, -1))
    fittable = (~_is_constant(target, train))[..., None].float()  # (S, folds, 1, 1)

    project = (lambda v: v - v.mean(dim=-1, keepdim=True)) if zero_mean else (lambda v: v)
    param = start[..., 0, :].float().clone()  # (S, folds, R, P)
    optimizer = torch.optim.Adam([param], lr=lr)
    for _ in range(steps):
        gradient = _order1_gradient(Phi, project(param), weights, weighted_target, target_var, count)
        param.grad = -project(gradient) * fittable
        optimizer.step()
        on_step()
    return _best_restart(phi, target, train, project(param.double())[..., None, :], rows, cols)


def _order1_gradient(Phi: torch.Tensor, v: torch.Tensor, weights: torch.Tensor, weighted_target: torch.Tensor,
                     target_var: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Gradient ``∂r/∂v`` (..., P) of the weighted Pearson r between the probe's cosine matrix and the target.

    ``Phi`` is the order-1 signature as (T·V_labels, P); ``v`` (..., P); ``weights`` (..., T, T) symmetric
    0/1 pair weights; ``weighted_target`` the weights times the target centred on its weighted mean;
    ``target_var`` and ``count`` its weighted sum of squares and the weight total (...). With ``h = φ v``
    and ``C`` the cosine matrix of its rows, ``∂r/∂C = w (y_c / √(var_x var_y) − r x_c / var_x)`` and
    ``∂r/∂v = φ^T ∂r/∂h`` (:func:`cosine_backward`).
    """
    h = (v @ Phi.T).unflatten(-1, (weights.shape[-1], -1))  # (..., T, V_labels)
    cos, inv_norm = row_cosines(h)
    deviation = cos - ((weights * cos).sum(dim=(-2, -1)) / count)[..., None, None]
    centred = weights * deviation
    # In place where a temporary is not read again: the same operations in the same order (products
    # commute bitwise), fewer (..., T, T) allocations per step.
    var = deviation.mul_(centred).sum(dim=(-2, -1)).clamp_min(1e-30)
    inv_sd = torch.rsqrt((var * target_var).clamp_min(1e-30))
    r = (weighted_target * cos).sum(dim=(-2, -1)) * inv_sd
    d_cos = (weighted_target * inv_sd[..., None, None]).sub_(centred.mul_((r / var)[..., None, None]))
    return cosine_backward(h, cos, inv_norm, d_cos).flatten(-2) @ Phi


def row_cosines(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine matrix of the rows of ``h`` (..., T, Y) and the rows' inverse norms: ((..., T, T), (..., T)).

    Computed from the Gram matrix, so the (T, Y) rows are never normalised; a zero row has cosine 0 with
    every row but itself (its norm is floored at 1e-12, as ``torch.nn.functional.normalize`` does)."""
    gram = h @ h.mT
    inv_norm = torch.rsqrt(torch.diagonal(gram, dim1=-2, dim2=-1).clamp_min(1e-24))
    return gram.mul_(inv_norm[..., :, None]).mul_(inv_norm[..., None, :]), inv_norm


def cosine_backward(h: torch.Tensor, cos: torch.Tensor, inv_norm: torch.Tensor, d_cos: torch.Tensor) -> torch.Tensor:
    """``∂L/∂h`` (..., T, Y) for ``C = row_cosines(h)`` given ``D = ∂L/∂C`` (..., T, T), symmetric, each entry
    of the full matrix counted as its own variable (a loss over pairs a < b written on the full matrix).

    With ``n_a = |h_a|``: ``∂L/∂h_a = Σ_b 2 D_ab (h_b / (n_a n_b) − C_ab h_a / n_a²)``, one batched
    product ``(E − diag q) h`` with ``E = 2 D / (n_a n_b)`` and ``q_a = Σ_b 2 D_ab C_ab / n_a²``."""
    both_sides = 2 * d_cos
    per_pair = (both_sides * inv_norm[..., :, None]).mul_(inv_norm[..., None, :])
    # Subtracting diag q in place gives the bits of ``per_pair - diag_embed(q)`` (x − 0 is x) without
    # two more passes over the (..., T, T) matrices.
    per_pair.diagonal(dim1=-2, dim2=-1).sub_(both_sides.mul_(cos).sum(dim=-1) * inv_norm**2)
    return per_pair @ h


def _signature_array(phi: object) -> np.ndarray:
    """Check an order-m label signature (T >= 2, V_labels, P, ..., P) with m >= 1 equal context axes."""
    arr = float_array(phi, "phi")
    if arr.ndim < 3 or arr.shape[0] < 2 or len(set(arr.shape[2:])) != 1:
        raise InputError(f"phi must be an order-m label signature (T >= 2 tokens, V_labels, P, ..., P): phi1 "
                         f"(T, V_labels, P) for the order-1 probe, phi2 (T, V_labels, P, P) for order 2; "
                         f"got shape {arr.shape}")
    return arr


def probe_embeddings(phi: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``h = φ ×_2 v_1 … ×_{m+1} v_m``: signature (T, V_labels, P^m), probes (..., m, P) -> (..., T, V_labels).

    The last context axis is contracted with the last vector first; for m = 1 this is ``φ1 @ v``."""
    n_tokens, order = phi.shape[0], phi.ndim - 2
    h = phi.reshape(n_tokens, -1, phi.shape[-1])  # (T, V_labels P^(m-1), P)
    h = torch.einsum("tlp,...p->...tl", h, v[..., order - 1, :])
    for i in range(order - 2, -1, -1):
        h = torch.einsum("...tlp,...p->...tl", h.unflatten(-1, (-1, phi.shape[-1])), v[..., i, :])
    return h


def _probe_triangle(phi: torch.Tensor, v: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Probes (..., m, P) -> (..., n_pairs) upper triangles of the cosine matrix of ``h`` (T, V_labels)
    (:func:`probe_embeddings`)."""
    h = torch.nn.functional.normalize(probe_embeddings(phi, v), dim=-1)
    return (h @ h.transpose(-1, -2))[..., rows, cols]


def _weighted_pearson(
    x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, undefined_as_nan: bool = False
) -> torch.Tensor:
    """Pearson r along the last axis over the entries where the 0/1 weight ``w`` is 1 (broadcasting).

    With ``undefined_as_nan`` (scoring) r is NaN where either side is constant, judged with the same
    tolerance as :func:`~ctxstair.alignment.compare`; the variance product is floored so that the
    training loss and its gradient stay finite.
    """
    n = w.sum(dim=-1, keepdim=True)
    xc = x - (w * x).sum(dim=-1, keepdim=True) / n
    yc = y - (w * y).sum(dim=-1, keepdim=True) / n
    cov = (w * xc * yc).sum(dim=-1)
    var = (w * xc**2).sum(dim=-1) * (w * yc**2).sum(dim=-1)
    r = cov * torch.rsqrt(var.clamp_min(1e-30))
    if not undefined_as_nan:
        return r
    return torch.where(_is_constant(x, w) | _is_constant(y, w), torch.nan, r.clamp(-1.0, 1.0))


def _is_constant(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Whether the selected entries of ``x`` span at most CONSTANT_RTOL times their largest magnitude."""
    sel = w.bool()
    hi = torch.where(sel, x, -torch.inf).amax(dim=-1)
    lo = torch.where(sel, x, torch.inf).amin(dim=-1)
    return hi - lo <= CONSTANT_RTOL * torch.where(sel, x.abs(), 0.0).amax(dim=-1)

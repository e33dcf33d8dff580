"""The fast analysis paths against the implementations they replace: the float32 closed-form probe
fits (SPEC §3, §7), the permutation null without ranks, order shares of many snapshots in one
autograd pass (SPEC §6.1).

The probes take the same Adam steps from the same start in both paths, so they differ by rounding
only; the tolerance 0.005 on held-out scores is the one the analysis promises. A float64 rewrite of
the same fit (not kept) already moves the LM prefix probe's held-out MSE by up to 3e-3 from the
autograd reference after 300 steps: Adam amplifies rounding on that objective, so its tolerance is
not tighter. The run-level comparisons on the paper recipes are opt-in (``-m slow``)."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from ctxstair import tasks
from ctxstair.alignment import (
    compare,
    cosine_matrix,
    partial_correlation,
    permuted_partial_correlation,
    permuted_pearson,
    probe_alignment,
)
from ctxstair.alignment.probe import cosine_backward, row_cosines
from ctxstair.analysis import analyse
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.errors import InputError
from ctxstair.measure import primitives
from ctxstair.models import CBOWEnsemble, MemberSpec
from ctxstair.recipes import run_recipe
from ctxstair.run import Run
from ctxstair.rundir import read_alignment
from ctxstair.theory.activation_fit import preactivation_range, preactivation_ranges
from ctxstair.theory.reference import embedding_gradient, embedding_gradients
from ctxstair.theory.shares import order_shares, stacked_order_shares
from ctxstair.train import train_run

TOLERANCE = 0.005


@pytest.fixture
def rng():
    return np.random.default_rng(16)


def _probe_signature_and_snapshots(rng, T=14, labels=9, P=8, S=4):
    """Embeddings (S, T, labels) that drift from random to a planted probe's ``φ1 v*`` (v* ⟂ 1) over S snapshots."""
    phi1 = rng.random((T, labels, P))
    v_star = rng.normal(size=P)
    planted = phi1 @ (v_star - v_star.mean())
    noise = rng.normal(size=(T, labels))
    return phi1, np.stack([(1 - s / (S - 1)) * noise + s / (S - 1) * planted for s in range(S)])


def test_cosine_backward_is_the_autograd_gradient(rng):
    h = torch.from_numpy(rng.normal(size=(3, 7, 5)))
    target = torch.from_numpy(rng.normal(size=(3, 7, 7)))
    target = target + target.mT
    leaf = h.clone().requires_grad_(True)
    unit = torch.nn.functional.normalize(leaf, dim=-1)
    rows, cols = torch.triu_indices(7, 7, 1)
    loss = ((unit @ unit.mT)[:, rows, cols] * target[:, rows, cols]).sum()
    (expected,) = torch.autograd.grad(loss, leaf)
    cos, inv_norm = row_cosines(h)
    d_cos = torch.triu(target, 1) / 2 + torch.triu(target, 1).mT / 2  # the same loss on the full matrix
    np.testing.assert_allclose(cosine_backward(h, cos, inv_norm, d_cos).numpy(), expected.numpy(), atol=1e-12)


@pytest.mark.parametrize("zero_mean", [False, True])
def test_fast_probe_equals_the_reference_fit(rng, zero_mean):
    phi1, snaps = _probe_signature_and_snapshots(rng)
    fast = probe_alignment(phi1, snaps, zero_mean=zero_mean, restarts=2)
    reference = probe_alignment(phi1, snaps, zero_mean=zero_mean, restarts=2, method="reference")
    np.testing.assert_array_equal(fast.pair_folds, reference.pair_folds)
    np.testing.assert_allclose(fast.heldout_pearson_per_fold, reference.heldout_pearson_per_fold, atol=TOLERANCE)
    assert fast.heldout_pearson[-1] > 0.9  # the planted geometry is found, not just matched


def test_probe_refuses_an_unknown_method(rng):
    phi1, snaps = _probe_signature_and_snapshots(rng)
    with pytest.raises(InputError, match="probe method"):
        probe_alignment(phi1, snaps, method="newton")


def test_fast_prefix_probe_equals_the_reference_fit(rng):
    T, labels, C = 24, 30, 12
    phi = rng.random((T, labels, C))
    W = np.stack([phi @ rng.normal(size=C) @ rng.normal(size=(labels, 5)) + s * rng.normal(size=(T, 5))
                  for s in range(3)])
    train_idx, heldout_idx = primitives.token_split(T, 0.25, 0)
    for fn in (primitives.prefix_probe, primitives.shuffled_baseline):
        fast = fn(phi, W, train_idx, heldout_idx)["heldout_mse"]
        reference = fn(phi, W, train_idx, heldout_idx, method="reference")["heldout_mse"]
        np.testing.assert_allclose(fast, reference, atol=TOLERANCE)


def test_permuted_pearson_equals_pearson_of_the_permuted_matrices(rng):
    A, B = cosine_matrix(rng.normal(size=(9, 4))), cosine_matrix(rng.normal(size=(9, 4)))
    perms = np.stack([rng.permutation(9) for _ in range(20)])
    expected = [compare(A[np.ix_(p, p)], B)["pearson"] for p in perms]
    np.testing.assert_allclose(permuted_pearson(A, B, perms), expected, atol=1e-12)
    assert np.all(np.isnan(permuted_pearson(np.ones((9, 9)), B, perms)))
    with pytest.raises(InputError, match="permutations"):
        permuted_pearson(A, B, perms[:, ::-1] % 8)


def test_permuted_partial_correlation_equals_partial_correlation_of_the_permuted_matrices(rng):
    A, B, C = (cosine_matrix(rng.normal(size=(9, 4))) for _ in range(3))
    perms = np.stack([rng.permutation(9) for _ in range(20)])
    expected = [partial_correlation(A[np.ix_(p, p)], B, C) for p in perms]
    np.testing.assert_allclose(permuted_partial_correlation(A, B, C, perms), expected, atol=1e-12)


def three_members() -> tuple:
    """``add`` N = 8 and the stacked float64 weights (3, V, 12) of three one-member ensembles."""
    ds = tasks.make("add", N=8)
    models = [CBOWEnsemble(ds.vocab_size, [MemberSpec(seed, 12, 0.5, 0.5)], "relu", dtype=torch.float64)
              for seed in range(3)]
    return ds, np.stack([m.W_E[0].detach().numpy() for m in models]), np.stack([m.W_U[0].detach().numpy()
                                                                               for m in models])


def test_stacked_embedding_gradient_equals_one_model_at_a_time(rng):
    ds, W_E, W_U = three_members()
    for objective in ("label", "loss"):
        together = embedding_gradient(W_E, W_U, ds.X, ds.y, objective, "relu")
        for k in range(3):
            alone = embedding_gradient(W_E[k], W_U[k], ds.X, ds.y, objective, "relu")
            np.testing.assert_allclose(together[k], alone, rtol=1e-12, atol=1e-15)
    stacked = stacked_order_shares(W_E, W_U, ds.X, ds.y, ds.tokens, "relu")
    for k in range(3):
        for got, want in zip(stacked[k], order_shares(W_E[k], W_U[k], ds.X, ds.y, ds.tokens, "relu")):
            assert got.keys() == want.keys()
            np.testing.assert_allclose([got[key] for key in got], [want[key] for key in want], rtol=1e-9)


def test_gradients_of_one_forward_pass_are_bitwise_those_of_one_pass_each(rng):
    """The order shares differentiate one forward pass twice; theory.csv must not move by a bit."""
    ds, W_E, W_U = three_members()
    objectives = ("label", "loss", "prediction")
    for got, objective in zip(embedding_gradients(W_E, W_U, ds.X, ds.y, objectives, "relu"), objectives):
        np.testing.assert_array_equal(got, embedding_gradient(W_E, W_U, ds.X, ds.y, objective, "relu"))
    np.testing.assert_array_equal(preactivation_ranges(W_E, ds.X), [preactivation_range(W, ds.X) for W in W_E])
    with pytest.raises(InputError, match="'loss' needs the labels"):
        embedding_gradients(W_E, W_U, ds.X, None, ("uniform", "loss"))


def test_cosine_backward_in_place_has_the_bits_of_the_dense_formula(rng):
    """The in-place diagonal and products of :func:`cosine_backward` and :func:`row_cosines` give the
    bits of the formula written out (the probes' numbers must not move)."""
    h = torch.from_numpy(rng.normal(size=(4, 9, 6))).float()
    d_cos = torch.from_numpy(rng.normal(size=(4, 9, 9))).float()
    d_cos = d_cos + d_cos.mT
    gram = h @ h.mT
    inv_norm = torch.rsqrt(torch.diagonal(gram, dim1=-2, dim2=-1).clamp_min(1e-24))
    cos = gram * inv_norm[..., :, None] * inv_norm[..., None, :]
    both_sides = 2 * d_cos
    dense = (both_sides * inv_norm[..., :, None] * inv_norm[..., None, :]
             - torch.diag_embed((both_sides * cos).sum(dim=-1) * inv_norm**2)) @ h
    got_cos, got_inv_norm = row_cosines(h)
    assert torch.equal(got_cos, cos) and torch.equal(got_inv_norm, inv_norm)
    assert torch.equal(cosine_backward(h, cos, inv_norm, d_cos), dense)


def _probe_rows(run_dir):
    table = read_alignment(run_dir)
    return {name: table["pearson"][table["signature"] == name] for name in ("order1_probe", "order1_probe_zero_mean")}


def _compare_alignment_paths(run_dir):
    """Re-analyse a run with ``analysis.probe=reference`` in a copy; every probe score within TOLERANCE."""
    run = Run(run_dir)
    reference = Run(run_dir, replace(run.config, analysis=replace(run.config.analysis, probe="reference")))
    fast_rows = _probe_rows(run_dir)
    analyse(reference, ["alignment"])
    reference_rows = _probe_rows(run_dir)
    for name, values in fast_rows.items():
        assert values.size > 0
        np.testing.assert_array_equal(np.isnan(values), np.isnan(reference_rows[name]))
        np.testing.assert_allclose(values, reference_rows[name], atol=TOLERANCE, err_msg=name)


def test_fast_alignment_analysis_matches_the_reference_on_a_short_run(tmp_path):
    cfg = apply_overrides(RunConfig(), {"task.N": 12, "model.d": 32, "model.activation": "relu",
                                        "train.optimizer": "gd", "train.lr": 1.0, "train.epochs": 200,
                                        "snapshots.every": 50, "snapshots.log_points": 6})
    out = train_run(cfg, tmp_path / "run", progress=False)
    analyse(out, ["alignment"])
    _compare_alignment_paths(out)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["staircase-add", "staircase-mod", "attention-arith"])
def test_fast_probe_matches_the_reference_on_every_snapshot_of_the_paper_recipes(recipe, tmp_path):
    out = run_recipe(recipe, tmp_path / recipe, {}, progress=False)
    for run_dir in sorted({p.parent for p in out.rglob("alignment.csv")}):
        _compare_alignment_paths(run_dir)

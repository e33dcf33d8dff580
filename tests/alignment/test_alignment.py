"""Tests for ctxstair.alignment (SPEC §3): each one checks a fact that could be false."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from ctxstair.alignment import (
    Reference,
    compare,
    cosine_matrix,
    distribution_match,
    fourier_alignment,
    fourier_signatures,
    linear_cka,
    partial_correlation,
    probe_alignment,
    signature_cosine,
    topk_overlap,
    upper_triangle,
)
from ctxstair.errors import InputError


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def random_phi1(rng, T=30, V=20, P=30):
    """A random order-1 label signature: each token's (V, P) table is a probability tensor."""
    return rng.dirichlet(np.ones(V * P), size=T).reshape(T, V, P)


def symmetric(tri, n):
    """Symmetric (n, n) matrix with the given strict upper triangle and unit diagonal."""
    S = np.eye(n)
    S[np.triu_indices(n, 1)] = tri
    return np.triu(S, 1).T + S


# --- cosine matrix -------------------------------------------------------------------------------


def test_cosine_matrix_matches_double_loop_and_flattens_trailing_axes(rng):
    M = rng.normal(size=(7, 3, 4))
    flat = M.reshape(7, -1)
    brute = np.array([[a @ b / np.linalg.norm(a) / np.linalg.norm(b) for b in flat] for a in flat])
    np.testing.assert_allclose(cosine_matrix(M), brute, atol=1e-14)
    np.testing.assert_allclose(signature_cosine(M), brute, atol=1e-14)  # order-1-shaped signature


def test_zero_rows_have_zero_similarity_including_diagonal(rng):
    M = rng.normal(size=(5, 3))
    M[2] = 0.0
    S = cosine_matrix(M)
    assert np.all(S[2] == 0) and np.all(S[:, 2] == 0)
    np.testing.assert_allclose(np.delete(np.diag(S), 2), 1.0)


def test_upper_triangle_order_is_row_major():
    S = np.arange(16.0).reshape(4, 4)
    np.testing.assert_array_equal(upper_triangle(S), [1, 2, 3, 6, 7, 11])


# --- compare ---------------------------------------------------------------------------------------


def test_compare_matches_scipy_on_the_upper_triangle(rng):
    A, B = cosine_matrix(rng.normal(size=(12, 5))), cosine_matrix(rng.normal(size=(12, 5)))
    a = np.array([A[i, j] for i in range(12) for j in range(i + 1, 12)])
    b = np.array([B[i, j] for i in range(12) for j in range(i + 1, 12)])
    out = compare(A, B)
    assert out["defined"] is True
    assert out["pearson"] == pytest.approx(pearsonr(a, b)[0], abs=1e-12)
    assert out["spearman"] == pytest.approx(spearmanr(a, b)[0], abs=1e-12)
    assert out["one_minus_mse"] == pytest.approx(1 - np.mean((a - b) ** 2), abs=1e-14)


def test_compare_ignores_diagonal_and_lower_triangle(rng):
    A, B = cosine_matrix(rng.normal(size=(8, 4))), cosine_matrix(rng.normal(size=(8, 4)))
    scrambled = A + np.tril(rng.normal(size=A.shape))
    assert compare(scrambled, B) == compare(A, B)


def test_identical_matrices_align_perfectly(rng):
    A = cosine_matrix(rng.normal(size=(10, 4)))
    out = compare(A, A)
    assert out["pearson"] == pytest.approx(1.0) and out["spearman"] == pytest.approx(1.0)
    assert out["one_minus_mse"] == 1.0


def test_constant_triangle_is_undefined_but_mse_is_reported(rng):
    identical = cosine_matrix(np.tile(rng.normal(size=(1, 6)), (9, 1)))  # all signatures equal
    assert np.ptp(upper_triangle(identical)) < 1e-14  # constant up to rounding
    out = compare(cosine_matrix(rng.normal(size=(9, 4))), identical)
    assert out["defined"] is False
    assert np.isnan(out["pearson"]) and np.isnan(out["spearman"])
    assert np.isfinite(out["one_minus_mse"]) and out["one_minus_mse"] < 1


def test_batched_compare_equals_looped(rng):
    stack = np.stack([cosine_matrix(rng.normal(size=(10, 3))) for _ in range(4)])
    stack[2] = 1.0  # one undefined member
    ref = cosine_matrix(rng.normal(size=(10, 6)))
    batched = compare(stack, ref)
    for s in range(4):
        single = compare(stack[s], ref)
        assert batched["defined"][s] == single["defined"]
        for key in ("pearson", "spearman", "one_minus_mse"):
            np.testing.assert_allclose(batched[key][s], single[key], atol=1e-14)
    assert batched["pearson"].shape == (4,) and not batched["defined"][2]


def test_a_reference_is_ranked_once_and_compares_like_compare(rng, monkeypatch):
    # What the monitor does at every measurement: many matrices against one signature geometry. The
    # reference's triangle is ranked when it is made, never again, and every answer is compare's.
    from ctxstair.alignment import similarity

    target = cosine_matrix(rng.normal(size=(12, 5)))
    target[0, 1] = target[1, 0] = target[0, 2]  # a tie among the reference's pairs
    reference = Reference(target)
    ranked = []
    monkeypatch.setattr(similarity, "rankdata", lambda x, axis: ranked.append(x.shape) or spearman_ranks(x, axis))
    for shape in ((12, 3), (4, 12, 3)):
        snapshots = cosine_matrix(rng.normal(size=shape)) if len(shape) == 2 else np.stack(
            [cosine_matrix(rng.normal(size=shape[1:])) for _ in range(shape[0])])
        got, expected = reference.compare(snapshots), compare(snapshots, target)
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])
    triangle = 12 * 11 // 2
    # Single matrices: the snapshot twice (reference.compare, compare) and the target once per compare()
    # call (it makes a reference of its own), never by the reference made above. Stacks: twice, whole.
    assert ranked.count((triangle,)) == 2 + 2 and ranked.count((4, triangle)) == 2


def spearman_ranks(x, axis):
    from scipy.stats import rankdata

    return rankdata(x, axis=axis)


# --- partial correlation -------------------------------------------------------------------------


def test_partial_correlation_matches_residualisation(rng):
    n = 15
    z = rng.normal(size=n * (n - 1) // 2)
    x = z + rng.normal(size=z.size)
    y = 0.5 * z + 0.3 * x + rng.normal(size=z.size)
    design = np.column_stack([np.ones_like(z), z])
    res_x = x - design @ np.linalg.lstsq(design, x, rcond=None)[0]
    res_y = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
    expected = pearsonr(res_x, res_y)[0]
    got = partial_correlation(symmetric(x, n), symmetric(y, n), symmetric(z, n))
    assert got == pytest.approx(expected, abs=1e-12)


def test_partial_correlation_sharp_cases(rng):
    n = 12
    m = n * (n - 1) // 2
    # z, u, w: centred and mutually orthogonal, so x = z + u and y = z + w share only z.
    q, _ = np.linalg.qr(np.column_stack([np.ones(m), rng.normal(size=(m, 3))]))
    z, u, w = q[:, 1], q[:, 2], q[:, 3]
    S0 = symmetric(z, n)
    raw = compare(symmetric(z + u, n), symmetric(z + w, n))["pearson"]
    assert raw == pytest.approx(0.5)  # the shared order-0 part alone makes them correlate
    assert partial_correlation(symmetric(z + u, n), symmetric(z + w, n), S0) == pytest.approx(0.0, abs=1e-12)
    assert partial_correlation(symmetric(z + u, n), symmetric(2 * z + u, n), S0) == pytest.approx(1.0)
    assert np.isnan(partial_correlation(symmetric(z + u, n), S0, S0))  # nothing left beyond S0


# --- probe -----------------------------------------------------------------------------------------


def heldout_and_train_scores(phi1, emb, result, s=0):
    """Recompute, independently, per-fold Pearson r on held-out and on training pairs."""
    target = upper_triangle(cosine_matrix(emb))
    held, train = [], []
    for f in range(result.v.shape[1]):
        tri = upper_triangle(cosine_matrix(phi1 @ result.v[s, f]))
        test = result.pair_folds == f
        held.append(pearsonr(tri[test], target[test])[0])
        train.append(pearsonr(tri[~test], target[~test])[0])
    return np.array(held), np.array(train)


def test_probe_recovers_exact_probe_embeddings(rng):
    phi1 = random_phi1(rng)
    v_star = rng.normal(size=phi1.shape[2]) * phi1.shape[2] ** -0.25
    emb = phi1 @ v_star  # embeddings are exactly h(v*), d = V_labels
    single = probe_alignment(phi1, emb)
    assert single.heldout_pearson.shape == (1,) and single.v.shape == (1, 5, phi1.shape[2])
    # From one start a fold can stall in a local optimum; the others find v* up to sign.
    assert np.sum(single.heldout_pearson_per_fold >= 0.99) >= 3
    result = probe_alignment(phi1, emb, restarts=3)
    assert np.all(result.heldout_pearson_per_fold >= 0.99)
    cos_v = result.v[0] @ v_star / np.linalg.norm(result.v[0], axis=1) / np.linalg.norm(v_star)
    np.testing.assert_allclose(np.abs(cos_v), 1.0, atol=1e-3)


@pytest.mark.parametrize("restarts", [1, 3])
def test_probe_reports_heldout_not_training_score(rng, restarts):
    phi1 = random_phi1(rng)
    noise = rng.normal(size=(phi1.shape[0], 16))  # independent of phi1
    result = probe_alignment(phi1, noise, restarts=restarts)
    held, train = heldout_and_train_scores(phi1, noise, result)
    np.testing.assert_allclose(result.heldout_pearson_per_fold[0], held, atol=1e-10)
    assert result.heldout_pearson[0] == pytest.approx(held.mean(), abs=1e-10)
    assert abs(result.heldout_pearson[0]) < 0.3
    assert train.mean() > held.mean() + 0.1  # the fit overfits its own pairs


def test_probe_folds_partition_pairs_evenly(rng):
    result = probe_alignment(random_phi1(rng, T=10, P=6), rng.normal(size=(10, 3)), folds=4, steps=1)
    counts = np.bincount(result.pair_folds, minlength=4)
    assert counts.sum() == 45 and counts.max() - counts.min() <= 1


def test_probe_is_deterministic_under_seed(rng):
    phi1, emb = random_phi1(rng, T=12, P=8), rng.normal(size=(12, 5))
    a, b = probe_alignment(phi1, emb, steps=50), probe_alignment(phi1, emb, steps=50)
    np.testing.assert_array_equal(a.v, b.v)
    np.testing.assert_array_equal(a.heldout_pearson_per_fold, b.heldout_pearson_per_fold)
    c = probe_alignment(phi1, emb, steps=50, seed=1)
    assert not np.allclose(a.v, c.v) and not np.array_equal(a.pair_folds, c.pair_folds)


def test_vectorised_snapshots_equal_separate_fits(rng):
    phi1 = random_phi1(rng, T=15, P=10)
    snaps = rng.normal(size=(3, 15, 6))
    together = probe_alignment(phi1, snaps, steps=100)
    for s in range(3):
        alone = probe_alignment(phi1, snaps[s], steps=100)
        np.testing.assert_allclose(together.v[s], alone.v[0], atol=1e-10)
        np.testing.assert_allclose(together.heldout_pearson_per_fold[s], alone.heldout_pearson_per_fold[0], atol=1e-10)


def test_probe_on_collinear_embeddings_is_undefined_and_leaves_other_snapshots_alone(rng):
    phi1 = random_phi1(rng, T=12, P=8)
    snaps = rng.normal(size=(2, 12, 4))
    snaps[1] = rng.normal(size=4) * rng.uniform(0.5, 2, size=(12, 1))  # collinear: all cosines 1
    result = probe_alignment(phi1, snaps, steps=50)
    assert np.isnan(result.heldout_pearson[1]) and np.all(np.isfinite(result.v))
    alone = probe_alignment(phi1, snaps[0], steps=50)
    np.testing.assert_allclose(result.heldout_pearson_per_fold[0], alone.heldout_pearson_per_fold[0], atol=1e-10)


def test_zero_mean_probe_is_orthogonal_to_ones(rng):
    phi1 = random_phi1(rng, T=12, P=8)
    emb = rng.normal(size=(12, 4))
    result = probe_alignment(phi1, emb, zero_mean=True, steps=50)
    np.testing.assert_allclose(result.v.sum(axis=-1), 0.0, atol=1e-12)
    held, _ = heldout_and_train_scores(phi1, emb, result)
    np.testing.assert_allclose(result.heldout_pearson_per_fold[0], held, atol=1e-10)


# --- Fourier view ----------------------------------------------------------------------------------


def test_fourier_signatures_match_definition(rng):
    phi1 = rng.normal(size=(4, 3, 6))
    got = fourier_signatures(phi1, ks=[0, 2, 3])
    for i, k in enumerate([0, 2, 3]):
        c = np.array([np.cos(2 * np.pi * k * j / 6) for j in range(6)])
        np.testing.assert_allclose(got[i], phi1 @ c, atol=1e-12)
    assert fourier_signatures(phi1).shape == (4, 4, 3)  # default k = 0..P//2


def test_fourier_k0_equals_order0_alignment(rng):
    T, V, P = 14, 9, 10
    phi0 = rng.dirichlet(np.ones(V), size=T)
    phi1 = phi0[..., None] * rng.dirichlet(np.ones(P), size=(T, V))  # marginally consistent
    snaps = rng.normal(size=(2, T, 5))
    out = fourier_alignment(phi1, snaps)
    assert out["pearson"].shape == (2, P // 2 + 1) and out["ks"][0] == 0
    for s in range(2):
        expected = compare(cosine_matrix(snaps[s]), cosine_matrix(phi0))
        for key in ("pearson", "spearman", "one_minus_mse"):
            assert out[key][s, 0] == pytest.approx(expected[key], abs=1e-12)


def test_fourier_alignment_peaks_at_embedded_frequency(rng):
    phi1 = rng.normal(size=(25, 12, 16))
    k_star = 5
    emb = fourier_signatures(phi1, ks=[k_star])[0]
    out = fourier_alignment(phi1, emb)
    assert out["ks"][np.argmax(out["pearson"][0])] == k_star
    assert out["pearson"][0, k_star] == pytest.approx(1.0)


# --- single-token check ----------------------------------------------------------------------------


def test_distribution_match_identical(rng):
    p = rng.dirichlet(np.ones(10))
    out = distribution_match(p, p)
    assert out["pearson"] == pytest.approx(1.0) and out["kl"] == 0.0 and out["jsd"] == 0.0


def test_distribution_match_two_point_closed_forms():
    a, b = 0.9, 0.3
    out = distribution_match([b, 1 - b], [a, 1 - a])  # (p_model, p_data)
    kl = a * np.log(a / b) + (1 - a) * np.log((1 - a) / (1 - b))  # KL(p_data || p_model)
    m = (a + b) / 2
    jsd = 0.5 * (a * np.log(a / m) + (1 - a) * np.log((1 - a) / (1 - m))) + 0.5 * (
        b * np.log(b / m) + (1 - b) * np.log((1 - b) / (1 - m))
    )
    assert out["kl"] == pytest.approx(kl) and out["jsd"] == pytest.approx(jsd)
    assert out["kl"] != pytest.approx(distribution_match([a, 1 - a], [b, 1 - b])["kl"])  # direction matters
    disjoint = distribution_match([0.0, 1.0], [1.0, 0.0])
    assert disjoint["jsd"] == pytest.approx(np.log(2)) and disjoint["kl"] == np.inf
    assert distribution_match([0.5, 0.5], [1.0, 0.0])["kl"] == pytest.approx(np.log(2))  # 0 log 0 = 0


def test_distribution_match_batch_and_uniform(rng):
    P_model, P_data = rng.dirichlet(np.ones(6), size=3), rng.dirichlet(np.ones(6), size=3)
    batch = distribution_match(P_model, P_data)
    for i in range(3):
        single = distribution_match(P_model[i], P_data[i])
        for key in ("pearson", "kl", "jsd"):
            assert batch[key][i] == pytest.approx(single[key], abs=1e-14)
    assert np.isnan(distribution_match(P_model[0], np.full(6, 1 / 6))["pearson"])  # uniform data law


# --- CKA and neighbours ----------------------------------------------------------------------------


def test_linear_cka_invariances_and_feature_form(rng):
    A, B = rng.normal(size=(20, 5)), rng.normal(size=(20, 8))
    rotation, _ = np.linalg.qr(rng.normal(size=(8, 8)))
    assert linear_cka(A, A) == pytest.approx(1.0)
    assert linear_cka(A, 3.7 * B @ rotation) == pytest.approx(linear_cka(A, B), abs=1e-12)
    Ac, Bc = A - A.mean(0), B - B.mean(0)
    feature_form = np.linalg.norm(Ac.T @ Bc) ** 2 / (np.linalg.norm(Ac.T @ Ac) * np.linalg.norm(Bc.T @ Bc))
    assert linear_cka(A, B) == pytest.approx(feature_form, abs=1e-12)


def test_topk_overlap(rng):
    S = cosine_matrix(rng.normal(size=(10, 3)))
    assert topk_overlap(S, S, 3) == 1.0
    A = np.array([[1, 0.9, 0.1, 0.0], [0.9, 1, 0.2, 0.1], [0.1, 0.2, 1, 0.8], [0.0, 0.1, 0.8, 1]])
    B = np.array([[1, 0.1, 0.9, 0.0], [0.1, 1, 0.2, 0.7], [0.9, 0.2, 1, 0.3], [0.0, 0.7, 0.3, 1]])
    # top-1 neighbours: A -> (1, 0, 3, 2), B -> (2, 3, 0, 1): no token keeps its neighbour
    assert topk_overlap(A, B, 1) == 0.0
    # top-2: A -> {1,2},{0,2},{3,1},{2,1}; B -> {2,1},{3,2},{0,3},{1,2}: overlaps 2,1,1,2
    assert topk_overlap(A, B, 2) == pytest.approx(6 / 8)


# --- bad input -------------------------------------------------------------------------------------

_phi = np.ones((6, 3, 4))
_emb = np.ones((6, 2))


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda: compare(np.ones((3, 4)), np.ones((3, 3))), "S_a"),
        (lambda: compare(np.ones((3, 3)), np.ones((4, 4))), "S_a and S_b"),
        (lambda: compare(np.ones((2, 3, 3)), np.ones((4, 3, 3))), "S_a"),
        (lambda: compare(np.ones((1, 1)), np.ones((1, 1))), "S_a"),
        (lambda: cosine_matrix(np.ones(4)), "M"),
        (lambda: signature_cosine(np.ones(4)), "sig"),
        (lambda: cosine_matrix([[1.0, np.nan]]), "M"),
        (lambda: probe_alignment(np.ones((6, 3)), _emb), "phi1"),
        (lambda: probe_alignment(_phi, np.ones((5, 2))), "embeddings"),
        (lambda: probe_alignment(_phi, _emb, folds=1), "folds"),
        (lambda: probe_alignment(_phi, _emb, folds=16), "folds"),
        (lambda: probe_alignment(_phi, _emb, lr=0), "lr"),
        (lambda: fourier_alignment(_phi, np.ones((7, 2))), "embeddings"),
        (lambda: fourier_signatures(_phi, ks=[3]), "ks"),
        (lambda: distribution_match([0.5, 0.5], [1.2, -0.2]), "p_data"),
        (lambda: distribution_match([0.5, 0.4], [0.5, 0.5]), "p_model"),
        (lambda: distribution_match([0.5, 0.5], [1.0, 0.0, 0.0]), "p_model and p_data"),
        (lambda: linear_cka(np.ones((4, 2)), np.ones((5, 2))), "A and B"),
        (lambda: topk_overlap(np.eye(4), np.eye(4), 4), "k"),
    ],
)
def test_bad_input_names_the_argument(call, argument):
    with pytest.raises(InputError, match=argument) as info:
        call()
    assert isinstance(info.value, ValueError)


def test_a_probe_result_prints_as_one_line_of_sizes_and_held_out_scores():
    from ctxstair.alignment.probe import ProbeResult

    r = np.linspace(0.1, 0.9, 9)
    result = ProbeResult(heldout_pearson=r, heldout_pearson_per_fold=np.tile(r[:, None], (1, 5)),
                         v=np.zeros((9, 5, 40)), pair_folds=np.zeros(190, dtype=np.int64))
    text = repr(result)
    assert "\n" not in text and len(text) < 200, text
    assert text == ("ProbeResult(9 snapshots × 5 folds, 190 pairs, v (9, 5, 40); held-out Pearson r: "
                    "0.100, 0.200, 0.300, …, 0.700, 0.800, 0.900)")

"""Gradient-flow decomposition of the CBOW embeddings (SPEC §6.1, §6.2): the order terms against
autograd of the model, order by order against a brute-force expansion over samples, the SPEC
formula as written, the softmax expansion, and polynomial fits of ReLU/GELU/tanh."""

import itertools
import math

import numpy as np
import pytest
from numpy.polynomial import polynomial as P

from ctxstair.errors import InputError
from ctxstair.signatures import label_signature, occurrence
from ctxstair.theory import (
    cbow_label_terms,
    cbow_prediction_correction_terms,
    cbow_prediction_terms,
    cbow_terms_with_fit,
    correction_max_order,
    embedding_gradient,
    fit_activation,
    label_max_order,
    preactivation_range,
)

V, D = 5, 4


def problem(L, K, seed, n=40, scale=0.6):
    """Random parameters and data; with V = 5 many sequences repeat a token (an α occurring twice)."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, V, (n, L))
    y = rng.integers(0, V, n)
    return rng.normal(0, scale, (V, D)), rng.normal(0, scale, (V, D)), X, y, rng.normal(size=K)


def rel_err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


# ---------------------------------------------------------------- identities against autograd (SPEC §6.1, §6.2)

PARTS = {  # name -> (terms function, autograd objective, highest order)
    "label": (lambda W_E, W_U, X, y, c: cbow_label_terms(W_E, W_U, X, y, c), label_max_order),
    "uniform": (lambda W_E, W_U, X, y, c: cbow_prediction_terms(W_E, W_U, X, c), label_max_order),
    "correction": (lambda W_E, W_U, X, y, c: cbow_prediction_correction_terms(W_E, W_U, X, c), correction_max_order),
}


@pytest.mark.parametrize("L", [2, 3, 4])
@pytest.mark.parametrize("K", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("part", ["label", "uniform", "correction"])
def test_order_terms_sum_to_autograd(part, L, K):
    W_E, W_U, X, y, c = problem(L, K, seed=100 * L + K)
    terms_fn, max_order = PARTS[part]
    terms = terms_fn(W_E, W_U, X, y, c)
    assert terms.shape == (V, max_order(L, K) + 1, D)
    assert rel_err(terms.sum(axis=1), embedding_gradient(W_E, W_U, X, y, part, "poly", c)) < 1e-10
    assert np.all(np.linalg.norm(terms, axis=(0, 2)) > 0)  # every order is present, none is vacuous


def test_correction_reaches_order_2K_minus_1():
    """With K = 2 the label terms stop at order 1 but the softmax correction reaches order 3 (SPEC §6.2)."""
    W_E, W_U, X, y, c = problem(4, 2, seed=3)
    assert cbow_label_terms(W_E, W_U, X, y, c).shape[1] == 2
    terms = cbow_prediction_correction_terms(W_E, W_U, X, c)
    assert terms.shape[1] == 4 and np.linalg.norm(terms[:, 3]) > 1e-3 * np.linalg.norm(terms)


# ---------------------------------------------------------------- order by order: brute force over samples

def sigma_derivative(c, order):
    coefficients = np.concatenate([[0.0], c])
    return lambda Z: P.polyval(Z, P.polyder(coefficients, order) if order else coefficients)


def orders_by_inclusion_exclusion(W_E, X, G):
    """Order parts of ``(1/n) Σ_n Σ_{i: x_i = α} G(h_n)`` straight from the samples, for G polynomial in h.

    The part of G in which exactly the context positions S (and no others) appear is, by inclusion-
    exclusion, ``Σ_{T ⊆ S} (−1)^{|S|−|T|} G(w_{x_i} + Σ_{j ∈ T} w_{x_j})``; order m collects |S| = m.
    Returns (V, L, d): orders 0..L−1.
    """
    n, L = X.shape
    out = np.zeros((W_E.shape[0], L, W_E.shape[1]))
    for i in range(L):
        others = [j for j in range(L) if j != i]
        for size in range(L):
            for S in itertools.combinations(others, size):
                part = sum((-1) ** (size - r) * G(W_E[X[:, i]] + W_E[X[:, list(T)]].sum(axis=1))
                           for r in range(size + 1) for T in itertools.combinations(S, r))
                np.add.at(out[:, size], X[:, i], part)
    return out / n


@pytest.mark.parametrize("L,K", [(2, 4), (3, 3), (4, 3), (4, 5)])
def test_each_order_matches_brute_force_expansion(L, K):
    W_E, W_U, X, y, c = problem(L, K, seed=7 * L + K, n=30)
    d1, d0 = sigma_derivative(c, 1), sigma_derivative(c, 0)
    b0 = W_U.mean(axis=0)
    Q = W_U.T @ (np.eye(V) - 1.0 / V) @ W_U
    cases = [
        (cbow_label_terms(W_E, W_U, X, y, c), lambda h: d1(h) * W_U[y]),
        (cbow_prediction_terms(W_E, W_U, X, c), lambda h: d1(h) * b0),
        (cbow_prediction_correction_terms(W_E, W_U, X, c), lambda h: d1(h) * (d0(h) @ Q) / V),
    ]
    for terms, G in cases:
        brute = orders_by_inclusion_exclusion(W_E, X, G)
        M = terms.shape[1] - 1
        assert rel_err(terms, brute[:, : M + 1]) < 1e-10
        assert np.abs(brute[:, M + 1:]).max(initial=0.0) < 1e-12 * np.abs(brute).max()  # nothing above order M


def test_spec_formula_as_written():
    """SPEC §6.1 literally: L r_α Σ_k k C_k 𝒲^{m,k}_α · φ^{y;m}_α with the (k−1)!/(l! Π n_r!) weights."""
    L, K = 3, 4
    W_E, W_U, X, y, c = problem(L, K, seed=11)
    tokens = np.array([4, 0, 2])
    terms = cbow_label_terms(W_E, W_U, X, y, c, tokens=tokens)
    Lr = L * occurrence(X, V)[tokens]
    for m in range(K):
        if m > L - 1:
            break
        phi = label_signature(X, y, m, V, tokens=tokens)  # (T, V, V^m)
        expected = np.zeros((tokens.size, D))
        for k in range(m + 1, K + 1):
            for ns in itertools.product(range(1, k), repeat=m):
                ell = k - 1 - sum(ns)
                if ell < 0:
                    continue
                weight = (math.comb(L - 1, m) * math.factorial(k - 1)
                          / (math.factorial(ell) * math.prod(map(math.factorial, ns))))
                letters = "bcd"[:m]
                subscripts = ",".join([f"tv{letters}", "vz"] + [f"{a}z" for a in letters]) + "->tz"
                contracted = np.einsum(subscripts, phi, W_U, *(W_E**n for n in ns))
                expected += k * c[k - 1] * weight * W_E[tokens] ** ell * contracted
        assert rel_err(terms[:, m], Lr[:, None] * expected) < 1e-12


# ---------------------------------------------------------------- sign convention and the softmax expansion

def test_label_minus_prediction_is_minus_loss_gradient():
    """Flow = label − prediction = −∇ mean loss with the exact softmax (SPEC §1)."""
    W_E, W_U, X, y, c = problem(3, 3, seed=5, scale=1.0)
    flow = cbow_label_terms(W_E, W_U, X, y, c).sum(axis=1) - embedding_gradient(W_E, W_U, X, y, "prediction", "poly", c)
    assert rel_err(flow, -embedding_gradient(W_E, W_U, X, y, "loss", "poly", c)) < 1e-10


def test_softmax_expansion_error_is_second_then_third_order():
    """``p ≈ 1/V`` leaves an O(|f|) error in p, the first correction an O(|f|²) one: scaling W_U by
    1/10 (f and ∂f/∂w both ∝ W_U) shrinks the flow's residual 100× without and 1000× with it, once the
    logits are small (here |f| ~ 1e-3)."""
    W_E, W_U, X, y, c = problem(3, 2, seed=9, scale=1.0)

    def residuals(scale):
        U = scale * W_U
        exact = -embedding_gradient(W_E, U, X, y, "loss", "poly", c)
        uniform = cbow_label_terms(W_E, U, X, y, c).sum(axis=1) - cbow_prediction_terms(W_E, U, X, c).sum(axis=1)
        corrected = uniform - cbow_prediction_correction_terms(W_E, U, X, c).sum(axis=1)
        return np.linalg.norm(exact - uniform), np.linalg.norm(exact - corrected)

    (u1, c1), (u2, c2) = residuals(1e-3), residuals(1e-4)
    assert 80 < u1 / u2 < 120
    assert 800 < c1 / c2 < 1200
    assert c2 < 0.05 * u2


# ---------------------------------------------------------------- subsets and input checks

def test_token_subsets_and_absent_tokens():
    W_E, W_U, X, y, c = problem(3, 3, seed=2)
    X = np.where(X == 4, 3, X)  # token 4 never occurs in X
    full = cbow_label_terms(W_E, W_U, X, y, c)
    np.testing.assert_allclose(cbow_label_terms(W_E, W_U, X, y, c, tokens=[3, 1]), full[[3, 1]], rtol=1e-13)
    assert np.all(full[4] == 0) and np.all(cbow_prediction_terms(W_E, W_U, X, c)[4] == 0)
    assert np.all(cbow_prediction_correction_terms(W_E, W_U, X, c)[4] == 0)


def test_bad_inputs_are_refused():
    W_E, W_U, X, y, c = problem(2, 2, seed=0)
    with pytest.raises(InputError, match="shape"):
        cbow_label_terms(W_E, W_U[:, :2], X, y, c)
    with pytest.raises(InputError, match="coeffs"):
        cbow_prediction_terms(W_E, W_U, X, [])
    with pytest.raises(InputError, match="tokens"):
        cbow_label_terms(W_E, W_U, X, y, c, tokens=[V])
    with pytest.raises(InputError, match="objective"):
        embedding_gradient(W_E, W_U, X, y, "nope")


# ---------------------------------------------------------------- polynomial fits of ReLU, GELU, tanh (SPEC §6.1)

def test_fit_of_tanh_recovers_its_taylor_series():
    C = fit_activation("tanh", 7, 0.3)
    assert C[0] == pytest.approx(1.0, abs=1e-6) and C[2] == pytest.approx(-1 / 3, abs=1e-3)
    assert np.abs(C[1::2]).max() < 1e-9  # tanh is odd: no even powers


def test_fit_of_relu_is_homogeneous_and_linear_plus_even():
    scaled = [fit_activation("relu", 6, a) * a ** np.arange(6) for a in (0.01, 1.0, 50.0)]
    np.testing.assert_allclose(scaled[0], scaled[2], rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(scaled[1], scaled[2], rtol=1e-8, atol=1e-12)
    C = fit_activation("relu", 6, 1.0)
    assert C[0] == pytest.approx(0.5, abs=1e-9) and np.abs(C[2::2]).max() < 1e-9  # relu = z/2 + |z|/2


def direct_label_gradient(W_E, W_U, X, y, slope):
    """``(1/n) Σ_n N_α(X_n) σ'(h_n) ⊙ W_U[y_n]`` from its definition (no autograd, no signatures)."""
    counts = np.zeros((X.shape[0], W_E.shape[0]))
    np.add.at(counts, (np.arange(X.shape[0])[:, None], X), 1.0)
    return counts.T @ (slope(counts @ W_E) * W_U[y]) / X.shape[0]


def test_terms_with_fit_report_their_residual():
    W_E, W_U, X, y, _ = problem(3, 1, seed=4, n=60, scale=0.3)
    relu = {deg: cbow_terms_with_fit(W_E, W_U, X, y, "relu", deg) for deg in (2, 6, 8)}
    fit = relu[6]
    assert fit.fit_range == pytest.approx(preactivation_range(W_E, X)) and fit.terms.shape == (V, 3, D)
    np.testing.assert_allclose(fit.gradient, direct_label_gradient(W_E, W_U, X, y, lambda h: (h > 0) * 1.0),
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(fit.residual, fit.gradient - fit.terms.sum(axis=1))
    assert fit.relative_residual == pytest.approx(np.linalg.norm(fit.residual) / np.linalg.norm(fit.gradient))
    # ReLU's σ' is a step: a polynomial misses a sizeable part, less at higher degree
    assert 0.05 < relu[8].relative_residual < relu[2].relative_residual < 0.8
    # smooth activations at small pre-activations are nearly polynomial
    small = [cbow_terms_with_fit(0.1 * W_E, W_U, X, y, name).relative_residual for name in ("tanh", "gelu")]
    assert max(small) < 1e-5
    with pytest.raises(InputError, match="activation"):
        fit_activation("poly", 3, 1.0)

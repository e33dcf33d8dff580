"""Position-specific and attention-weighted label signatures (SPEC §2 "Position-specific variants",
SPEC §6.3) against explicit loops over samples and positions."""

import itertools

import numpy as np
import pytest

from ctxstair.errors import InputError, TooLargeError
from ctxstair.signatures import attention_label_signature, label_signature, position_label_signature

SIZES = [(9, 1, 3), (13, 2, 4), (11, 3, 5), (10, 4, 4), (7, 4, 6)]  # (n, L, V)


def problem(n, L, V, seed, weighted):
    """Random data with repeated tokens (V small), one token that never occurs, attention rows on the simplex."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, V - 1, (n, L))  # token V-1 never occurs: its rows must be zero
    y = rng.integers(0, V, n)
    A = rng.dirichlet(np.full(L, 0.5), size=n)
    w = rng.uniform(0.1, 2.0, n) if weighted else None
    return X, y, A, w


def brute_position(X, y, V, positions, given_position=None, weights=None):
    """P(y = ν, x_positions = β | x_I = α) by a loop over samples and occurrences."""
    n, L = X.shape
    w = np.ones(n) if weights is None else weights
    total, occurrences = np.zeros((V, V) + (V,) * len(positions)), np.zeros(V)
    for k in range(n):
        for i in range(L) if given_position is None else [given_position]:
            occurrences[X[k, i]] += w[k]
            total[(X[k, i], y[k]) + tuple(X[k, s] for s in positions)] += w[k]
    seen = occurrences > 0
    total[seen] /= occurrences[seen].reshape((-1,) + (1,) * (total.ndim - 1))
    return total


def brute_attention(X, y, A, V, positions=(), attention_at=None, weights=None):
    """E[a_I (a_t) | y = ν, x_I = α, x_positions = β] by a loop over samples and occurrences."""
    n, L = X.shape
    w = np.ones(n) if weights is None else weights
    shape = (V, V) + (V,) * len(positions)
    received, count = np.zeros(shape), np.zeros(shape)
    for k in range(n):
        for i in range(L):
            index = (X[k, i], y[k]) + tuple(X[k, s] for s in positions)
            received[index] += w[k] * A[k, i] * (1.0 if attention_at is None else A[k, attention_at])
            count[index] += w[k]
    return np.divide(received, count, out=np.zeros(shape), where=count > 0)


def position_tuples(L):
    """Every 1- and 2-tuple of positions, coinciding ones included."""
    return [(s,) for s in range(L)] + list(itertools.product(range(L), repeat=2))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n,L,V", SIZES)
def test_position_label_signature_matches_brute_force(n, L, V, weighted):
    X, y, _, w = problem(n, L, V, seed=10 * L + V, weighted=weighted)
    for positions in position_tuples(L):
        for given in [None, *range(L)]:
            got = position_label_signature(X, y, V, positions, given, weights=w)
            np.testing.assert_allclose(got, brute_position(X, y, V, positions, given, w), rtol=0, atol=1e-13)
            assert not got[V - 1].any()


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n,L,V", SIZES)
def test_attention_label_signature_matches_brute_force(n, L, V, weighted):
    X, y, A, w = problem(n, L, V, seed=20 * L + V, weighted=weighted)
    for positions in [(), *position_tuples(L)]:
        for at in [None, *range(L)]:
            got = attention_label_signature(X, y, A, V, positions, at, weights=w)
            np.testing.assert_allclose(got, brute_attention(X, y, A, V, positions, at, w), rtol=0, atol=1e-13)


@pytest.mark.parametrize("n,L,V", SIZES[1:])
def test_position_signatures_are_marginally_consistent(n, L, V):
    """Summing over β gives the order-0 label signature (I uniform, s may equal I), and the
    one-position signature from the two-position one; with a given position, P(y = ν | x_{s0} = α)."""
    X, y, _, w = problem(n, L, V, seed=3 * L, weighted=True)
    phi0 = label_signature(X, y, 0, V, weights=w)
    for s1, s2 in itertools.product(range(L), repeat=2):
        one = position_label_signature(X, y, V, (s1,), weights=w)
        np.testing.assert_allclose(one.sum(axis=2), phi0, atol=1e-13)
        np.testing.assert_allclose(position_label_signature(X, y, V, (s1, s2), weights=w).sum(axis=3), one, atol=1e-13)
    for s0 in range(L):
        given = position_label_signature(X, y, V, (L - 1,), s0, weights=w).sum(axis=2)
        np.testing.assert_allclose(given, brute_position(X, y, V, (), s0, w), atol=1e-13)
        occurs = np.isin(np.arange(V), X[:, s0])
        np.testing.assert_allclose(given.sum(axis=1), occurs.astype(float), atol=1e-13)


@pytest.mark.parametrize("n,L,V", SIZES)
def test_phi_times_psi_summed_over_labels_is_the_attention_received(n, L, V):
    """Σ_ν φ^{y;0}_α(ν) ψ^y_α(ν) = E[a_I | x_I = α]; so does the x_L-conditioned pair summed over ν and β."""
    X, y, A, w = problem(n, L, V, seed=5 * L + V, weighted=True)
    received, count = np.zeros(V), np.zeros(V)
    for k in range(n):
        for i in range(L):
            received[X[k, i]] += w[k] * A[k, i]
            count[X[k, i]] += w[k]
    expected = np.divide(received, count, out=np.zeros(V), where=count > 0)
    phi0, psi0 = label_signature(X, y, 0, V, weights=w), attention_label_signature(X, y, A, V, weights=w)
    np.testing.assert_allclose((phi0 * psi0).sum(axis=1), expected, atol=1e-13)
    last = (L - 1,)
    phi1 = position_label_signature(X, y, V, last, weights=w)
    psi1 = attention_label_signature(X, y, A, V, last, weights=w)
    np.testing.assert_allclose((phi1 * psi1).sum(axis=(1, 2)), expected, atol=1e-13)


def test_subsets_select_entries():
    X, y, A, _ = problem(30, 3, 6, seed=1, weighted=False)
    tokens, labels, context = np.array([4, 1]), np.array([0, 5, 2]), np.array([3, 0])
    cut = np.ix_(tokens, labels, context, context)
    np.testing.assert_allclose(position_label_signature(X, y, 6, (2, 0), tokens=tokens, labels=labels, context=context),
                               position_label_signature(X, y, 6, (2, 0))[cut], atol=1e-15)
    np.testing.assert_allclose(attention_label_signature(X, y, A, 6, (2, 0), 1, tokens=tokens, labels=labels,
                                                         context=context),
                               attention_label_signature(X, y, A, 6, (2, 0), 1)[cut], atol=1e-15)


def test_too_large_is_refused_before_allocating():
    X, y, A, _ = problem(5, 3, 4, seed=2, weighted=False)
    huge = 100_000  # a dense (V, V, V, V) would need 8e20 bytes: allocating would fail differently
    with pytest.raises(TooLargeError, match="max_bytes"):
        position_label_signature(X, y, huge, (0, 1))
    with pytest.raises(TooLargeError, match="max_bytes"):
        attention_label_signature(X, y, A, huge, (0,))
    with pytest.raises(TooLargeError):
        position_label_signature(X, y, 4, (0,), max_bytes=8 * 4**3 - 1)
    position_label_signature(X, y, 4, (0,), max_bytes=8 * 4**3)


@pytest.mark.parametrize("call,match", [
    (lambda X, y, A: position_label_signature(X, y, 4, ()), "positions"),
    (lambda X, y, A: position_label_signature(X, y, 4, (0, 1, 2)), "positions"),
    (lambda X, y, A: position_label_signature(X, y, 4, 1), "positions"),
    (lambda X, y, A: position_label_signature(X, y, 4, (3,)), "0..2"),
    (lambda X, y, A: position_label_signature(X, y, 4, (-1,)), "0..2"),
    (lambda X, y, A: position_label_signature(X, y, 4, (0,), given_position=3), "given_position"),
    (lambda X, y, A: position_label_signature(X, y[:-1], 4, (0,)), "y"),
    (lambda X, y, A: position_label_signature(X, y, 4, (0,), weights=-np.ones(5)), "weights"),
    (lambda X, y, A: attention_label_signature(X, y, A[:, :2], 4), "A"),
    (lambda X, y, A: attention_label_signature(X, y, np.full_like(A, np.nan), 4), "A"),
    (lambda X, y, A: attention_label_signature(X, y, A, 4, (0,), attention_at=5), "attention_at"),
    (lambda X, y, A: attention_label_signature(X, y, A, 4, (0, 1, 2)), "positions"),
    (lambda X, y, A: attention_label_signature(X + 4, y, A, 4), "X"),
])
def test_bad_input_is_refused(call, match):
    X, y, A, _ = problem(5, 3, 4, seed=2, weighted=False)
    with pytest.raises(InputError, match=match):
        call(X, y, A)

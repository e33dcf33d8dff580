"""Signatures (SPEC §2) against an explicit enumeration of occurrences and context tuples."""

import itertools
import math

import numpy as np
import pytest

from ctxstair import signatures, tasks
from ctxstair.errors import TooLargeError


def brute_force(X, y, order, V, weights=None):
    """Literal SPEC §2 estimator: loop over samples, occurrences and ordered distinct tuples."""
    n, L = X.shape
    w = np.ones(n) if weights is None else weights
    shape = (V,) + ((V,) if y is not None else ()) + (V,) * order
    total = np.zeros(shape)
    occurrences = np.zeros(V)
    for s in range(n):
        for i in range(L):
            alpha = X[s, i]
            occurrences[alpha] += w[s]
            others = [j for j in range(L) if j != i]
            tuples = list(itertools.permutations(others, order))
            for tup in tuples:
                index = (alpha,) + ((y[s],) if y is not None else ()) + tuple(X[s, j] for j in tup)
                total[index] += w[s] / len(tuples)
    seen = occurrences > 0
    total[seen] /= occurrences[seen].reshape((-1,) + (1,) * (total.ndim - 1))
    return total


def random_data(seed, n, L, V):
    rng = np.random.default_rng(seed)
    return rng.integers(0, V, size=(n, L)), rng.integers(0, V, size=n)


@pytest.mark.parametrize("L", [1, 2, 3, 4])
def test_label_and_cooccurrence_signatures_match_brute_force_for_every_order(L):
    V = 5
    X, y = random_data(L, n=13, L=L, V=V)
    X[:, 0] = X[:, -1]  # repeated tokens within a sample: each copy is context for the other
    X[X == 4] = 3  # token 4 never occurs: its rows must be zero
    for order in range(L):
        expected = brute_force(X, y, order, V)
        got = signatures.label_signature(X, y, order, V)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
        assert not got[4].any()
        np.testing.assert_allclose(got[:4].reshape(4, -1).sum(axis=1), 1.0, atol=1e-12)
        co = signatures.cooccurrence_signature(X, order, V)
        np.testing.assert_allclose(co, brute_force(X, None, order, V), rtol=0, atol=1e-12)


def test_weights_count_each_sample_in_proportion():
    X, y = random_data(7, n=11, L=3, V=4)
    w = np.random.default_rng(0).uniform(0.1, 2.0, size=11)
    for order in range(3):
        np.testing.assert_allclose(
            signatures.label_signature(X, y, order, 4, weights=w), brute_force(X, y, order, 4, w), atol=1e-12
        )
    # Integer weights equal duplicating samples.
    k = np.array([1, 2, 3, 1, 1, 2, 1, 1, 1, 1, 3])
    dup = np.repeat(np.arange(11), k)
    np.testing.assert_allclose(
        signatures.label_signature(X, y, 2, 4, weights=k), signatures.label_signature(X[dup], y[dup], 2, 4), atol=1e-12
    )


def test_subsets_select_entries_without_renormalising():
    X, y = random_data(3, n=40, L=3, V=6)
    full = signatures.label_signature(X, y, 2, 6)
    tokens, labels, context = np.array([4, 1]), np.array([0, 5, 2]), np.array([3, 0])
    sub = signatures.label_signature(X, y, 2, 6, tokens=tokens, labels=labels, context=context)
    np.testing.assert_allclose(sub, full[np.ix_(tokens, labels, context, context)], atol=1e-15)
    co = signatures.cooccurrence_signature(X, 1, 6, tokens=tokens, context=context)
    np.testing.assert_allclose(co, signatures.cooccurrence_signature(X, 1, 6)[np.ix_(tokens, context)], atol=1e-15)


@pytest.mark.parametrize("L,order", [(3, 2), (4, 3), (4, 2)])
def test_hierarchy_is_marginally_consistent(L, order):
    X, y = random_data(11, n=50, L=L, V=4)
    high = signatures.label_signature(X, y, order, 4)
    low = signatures.label_signature(X, y, order - 1, 4)
    for axis in range(2, 2 + order):  # summing over any one context index gives order m-1
        np.testing.assert_allclose(high.sum(axis=axis), low, atol=1e-12)
    co_high = signatures.cooccurrence_signature(X, order, 4)
    np.testing.assert_allclose(co_high.sum(axis=1), signatures.cooccurrence_signature(X, order - 1, 4), atol=1e-12)


def test_occurrence_matches_token_frequency():
    X, _ = random_data(5, n=30, L=4, V=7)
    r = signatures.occurrence(X, 7)
    np.testing.assert_allclose(r, np.bincount(X.ravel(), minlength=7) / X.size)
    assert math.isclose(r.sum(), 1.0)


def test_add_order0_is_a_shifted_box():
    N = 12
    ds = tasks.make("add", N=N)
    phi0 = signatures.label_signature(ds.X, ds.y, 0, ds.vocab_size, tokens=ds.tokens)
    for row, alpha in zip(phi0, ds.tokens):
        expected = np.zeros(ds.vocab_size)
        expected[alpha + 1 : alpha + N + 1] = 1 / N
        np.testing.assert_allclose(row, expected, atol=1e-15)


def test_minmax_order0_matches_closed_forms():
    N = 9
    ds = tasks.make("minmax", N=N)
    phi0 = signatures.label_signature(ds.X, ds.y, 0, ds.vocab_size)
    nu = np.arange(ds.vocab_size)
    numbers = (nu >= 1) & (nu <= N)
    for x in range(1, N + 1):
        expected = np.where(numbers, 0.5 * (nu == x) + 1 / (2 * N), 0.0)
        np.testing.assert_allclose(phi0[x], expected, atol=1e-15)
    a, b = ds.meta["anchor_max"], ds.meta["anchor_min"]
    np.testing.assert_allclose(phi0[a], np.where(numbers, (2 * nu - 1) / N**2, 0.0), atol=1e-15)
    np.testing.assert_allclose(phi0[b], np.where(numbers, (2 * (N - nu) + 1) / N**2, 0.0), atol=1e-15)


@pytest.mark.parametrize("M,identical", [(4, True), (5, True), (10, True), (3, False), (7, False)])
def test_modsum_order0_rows_identical_exactly_when_M_divides_N(M, identical):
    ds = tasks.make("modsum", N=20, M=M)
    phi0 = signatures.label_signature(ds.X, ds.y, 0, ds.vocab_size, tokens=ds.tokens)
    assert np.allclose(phi0, phi0[0], atol=1e-15) == identical


def test_oversized_dense_request_is_refused_before_allocating():
    X, y = random_data(0, n=10, L=6, V=1000)
    with pytest.raises(TooLargeError, match=r"GiB.*tokens=, labels= or context="):
        signatures.label_signature(X, y, 3, 1000)
    small = signatures.label_signature(X, y, 3, 1000, tokens=[1, 2], labels=[0], context=[5, 6, 7])
    assert small.shape == (2, 1, 3, 3, 3)
    with pytest.raises(TooLargeError, match="max_bytes"):
        signatures.label_signature(X, y, 0, 1000, max_bytes=1000)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(X=np.array([[0, -1]])), "X contains token id -1"),
        (dict(X=np.array([[0, 9]])), "X contains token id 9; ids must be in 0..3"),
        (dict(X=np.array([0, 1])), r"X must have shape \(n_samples, seq_len\)"),
        (dict(X=np.array([[0.0, 1.0]])), "X must hold integer"),
        (dict(X=np.zeros((0, 2), dtype=int), y=np.zeros(0, dtype=int)), "X is empty"),
        (dict(y=np.array([0, 1, 2])), r"y must have shape \(1,\)"),
        (dict(y=np.array([4])), "y contains token id 4"),
        (dict(order=2), r"order must be in 0..1"),
        (dict(order=-1), r"order must be in 0..1"),
        (dict(tokens=[7]), "tokens contains token id 7"),
        (dict(context=[1, 1]), "context contains duplicate"),
        (dict(weights=[-1.0]), "weights must be finite, non-negative"),
        (dict(vocab_size=0), "vocab_size must be a positive integer"),
    ],
)
def test_invalid_input_is_rejected_with_a_message_naming_the_argument(kwargs, match):
    args = dict(X=np.array([[0, 1]]), y=np.array([2]), order=0, vocab_size=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        signatures.label_signature(**args)


def test_a_hierarchy_prints_as_one_line_of_sizes_and_shapes():
    hierarchy = signatures.signature_hierarchy(tasks.make("add", N=6), max_order=1)
    text = repr(hierarchy)
    assert "\n" not in text and len(text) < 200, text
    assert text.startswith(f"SignatureHierarchy({len(hierarchy.tokens)} tokens, {len(hierarchy.labels)} labels")
    assert f"order 1 {tuple(hierarchy.orders[1].shape)}" in text

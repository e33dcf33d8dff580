"""Corpus-scale signatures of token windows (SPEC §6.4, §7): the next-token occurrence and signature
and the first-order prefix signature, against explicit loops over windows and positions."""

import tracemalloc

import numpy as np
import pytest

from ctxstair.errors import InputError, TooLargeError
from ctxstair.signatures import NextTokenCounts, next_token_occurrence, next_token_signature, prefix_signature
from ctxstair.signatures import prefix as prefix_module


def random_windows(n, T, V, seed):
    """Windows over a small vocabulary, so tokens repeat within a window."""
    return np.random.default_rng(seed).integers(0, V, (n, T))


# ---------------------------------------------------------------- next-token signature

def brute_force_next_token(chunks, V):
    """(r_nt, phi_nt) over all V: loops over every window of every (X, weights) chunk and every s < T-1."""
    pairs, first = np.zeros((V, V)), np.zeros(V)
    for X, w in chunks:
        for i in range(X.shape[0]):
            for s in range(X.shape[1] - 1):
                pairs[X[i, s], X[i, s + 1]] += w[i]
                first[X[i, s]] += w[i]
    phi = np.zeros((V, V))
    for a in range(V):
        if first[a] > 0:
            phi[a] = pairs[a] / first[a]
    return first / first.sum(), phi


@pytest.mark.parametrize("T", [2, 6])
def test_next_token_signature_against_brute_force(T):
    V = 11
    X = random_windows(15, T, V - 1, seed=0)  # token 10 never occurs
    X[0, -1] = 9  # 9 also sits at a last position, which is not a pair's first token
    w = np.random.default_rng(1).random(15)
    for weights in (None, w):
        r = next_token_occurrence(X, V, weights=weights)
        phi = next_token_signature(X, V, weights=weights)
        r_bf, phi_bf = brute_force_next_token([(X, np.ones(15) if weights is None else w)], V)
        np.testing.assert_allclose(r, r_bf, rtol=1e-13, atol=0)
        np.testing.assert_allclose(phi, phi_bf, rtol=1e-13, atol=0)
        assert r.sum() == pytest.approx(1) and np.allclose(phi[r > 0].sum(1), 1)
        assert r[10] == 0 and not phi[10].any()
        # subsets in any order, with a token that never occurs, select entries; nothing renormalised
        tokens, labels = np.array([7, 2, 10]), np.array([8, 0, 3, 10])
        np.testing.assert_allclose(next_token_signature(X, V, tokens=tokens, labels=labels, weights=weights),
                                   phi_bf[np.ix_(tokens, labels)], rtol=1e-13, atol=0)


def test_chunked_counts_equal_one_shot():
    V, X = 12, random_windows(30, 7, 12, seed=2)
    w = np.random.default_rng(3).random(30)
    counts = NextTokenCounts(V)
    for lo, hi in [(0, 4), (4, 19), (19, 30)]:
        assert counts.add(X[lo:hi], weights=w[lo:hi]) is counts
    np.testing.assert_allclose(counts.occurrence(), next_token_occurrence(X, V, weights=w), rtol=1e-13, atol=0)
    np.testing.assert_allclose(counts.signature(), next_token_signature(X, V, weights=w), rtol=1e-13, atol=0)
    # chunks may have different lengths: they pool their pairs
    short, long = X[:10, :4], X[10:]
    counts = NextTokenCounts(V).add(short, weights=w[:10]).add(long, weights=w[10:])
    r_bf, phi_bf = brute_force_next_token([(short, w[:10]), (long, w[10:])], V)
    np.testing.assert_allclose(counts.occurrence(), r_bf, rtol=1e-13, atol=0)
    np.testing.assert_allclose(counts.signature(), phi_bf, rtol=1e-13, atol=0)


def test_next_token_functions_refuse_bad_input():
    for fn in (next_token_signature, next_token_occurrence):
        with pytest.raises(InputError, match="T >= 2"):
            fn(np.zeros((3, 1), dtype=np.int64), 5)
        with pytest.raises(InputError, match="ids must be in 0..4"):
            fn(np.full((3, 2), 5), 5)
        with pytest.raises(InputError, match="weights must have shape"):
            fn(np.zeros((3, 2), dtype=np.int64), 5, weights=np.ones(2))
    with pytest.raises(TooLargeError, match="tokens="):
        NextTokenCounts(1000, max_bytes=1000)
    for method in (NextTokenCounts.occurrence, NextTokenCounts.signature):
        with pytest.raises(InputError, match="no next-token pairs"):
            method(NextTokenCounts(5))


# ---------------------------------------------------------------- prefix signature

def brute_force_prefix(X, tokens, labels, context):
    """Loops over every window, every position s < T-1 and every context token."""
    counts = np.zeros((len(tokens), len(labels), len(context)))
    events = np.zeros(len(tokens))
    for row in X.tolist():
        for s in range(len(row) - 1):
            if row[s] not in tokens:
                continue
            i = tokens.index(row[s])
            events[i] += 1
            if row[s + 1] not in labels:
                continue
            for q, beta in enumerate(context):
                if beta in row[:s]:
                    counts[i, labels.index(row[s + 1]), q] += 1
    for i in range(len(tokens)):
        if events[i] > 0:
            counts[i] /= events[i]
    return counts


def dense_prefix(X, tokens, labels, context):
    """The same count as one product over (window, position) indicator tensors — another route."""
    is_ctx = X[:, :, None] == np.asarray(context)  # (n, T, c)
    earlier = (np.cumsum(is_ctx, axis=1) - is_ctx)[:, :-1] > 0  # β at a position < s, for s < T-1
    is_tok = (X[:, :-1, None] == np.asarray(tokens)).astype(float)
    is_lab = (X[:, 1:, None] == np.asarray(labels)).astype(float)
    counts = np.einsum("nsa,nsv,nsb->avb", is_tok, is_lab, earlier.astype(float))
    return counts / np.maximum(is_tok.sum((0, 1)), 1)[:, None, None]


@pytest.mark.parametrize("T", [2, 3, 9])
def test_prefix_signature_against_brute_force(T):
    X = random_windows(12, T, 6, seed=T)  # ids 0..5, many repeats within a window
    X[0] = 2  # a window of one repeated token
    tokens, labels, context = [4, 0, 2, 9], [5, 1, 2, 0, 3, 4, 7], [2, 11, 0, 5, 1]  # 7, 9, 11 never occur
    phi = prefix_signature(X, np.array(tokens), np.array(labels), np.array(context))
    assert phi.dtype == np.float64 and phi.shape == (4, 7, 5)
    np.testing.assert_allclose(phi, brute_force_prefix(X, tokens, labels, context), rtol=1e-13, atol=0)
    assert not phi[3].any() and not phi[:, 6].any() and not phi[:, :, 1].any()
    if T == 2:  # no position before s = 0
        assert not phi.any()
    else:
        assert phi.any()
        # β present is a sub-event of the next-token pair
        nt = next_token_signature(X, 12, tokens=tokens, labels=labels)
        assert np.all(phi <= nt[:, :, None] + 1e-15)


def test_prefix_signature_full_vocabulary_against_dense_product():
    V = 20
    X = np.random.default_rng(4).zipf(1.3, (300, 12)) % V  # skewed: frequent tokens repeat a lot
    ids = np.arange(V)
    phi = prefix_signature(X, ids, ids, ids)
    np.testing.assert_allclose(phi, dense_prefix(X, ids, ids, ids), rtol=1e-12, atol=0)
    # summed over labels: P(β precedes | x_s = α) <= 1, and the frequent tokens reach well above 0
    assert phi.sum(1).max() <= 1 + 1e-12 and phi.sum(1).max() > 0.5


def test_prefix_with_beta_at_position_0_is_next_token_signature_after_it():
    V, beta = 9, 8
    X = random_windows(40, 7, V - 1, seed=5)  # ids 0..7 ...
    X[:, 0] = beta  # ... and β = 8 opens every window, so it is present for every s >= 1
    labels = np.array([3, 0, 5, 1])
    phi = prefix_signature(X, np.arange(8), labels, np.array([beta]))[:, :, 0]
    # β never sits at s >= 1 and is not a token here, so every event of a token has β before it
    np.testing.assert_allclose(phi, next_token_signature(X, V, tokens=np.arange(8), labels=labels),
                               rtol=1e-13, atol=0)
    # With β among the tokens, its events at s = 0 count in the denominator but never in the
    # numerator: φ(α, ν, β) · #events(α) = φ^nt over s >= 1 · #events(α at s >= 1).
    tokens = np.array([beta, 2, 6])
    phi = prefix_signature(X, tokens, labels, np.array([beta]))[:, :, 0]
    events = next_token_occurrence(X, V)[tokens] * X.shape[0] * 6
    events_after_0 = next_token_occurrence(X[:, 1:], V)[tokens] * X.shape[0] * 5
    nt_after_0 = next_token_signature(X[:, 1:], V, tokens=tokens, labels=labels)
    np.testing.assert_allclose(phi * events[:, None], nt_after_0 * events_after_0[:, None], rtol=1e-12, atol=1e-12)
    assert not phi[0].any()  # β = 8 only at s = 0, where nothing precedes it


@pytest.mark.parametrize("chunk_tokens", [1, 24])
def test_prefix_signature_chunked_equals_one_shot(monkeypatch, chunk_tokens):
    from ctxstair.signatures import next_token

    X = random_windows(25, 8, 7, seed=6)
    tokens, labels, context = np.array([1, 3, 0]), np.arange(7), np.array([6, 2, 4, 0])
    one_shot = prefix_signature(X, tokens, labels, context)
    # windows of 8 tokens: pieces of 1 and of 3 windows
    monkeypatch.setattr(next_token, "CHUNK_TOKENS", chunk_tokens)
    np.testing.assert_array_equal(prefix_signature(X, tokens, labels, context), one_shot)
    np.testing.assert_allclose(one_shot, brute_force_prefix(X, tokens.tolist(), labels.tolist(), context.tolist()),
                               rtol=1e-13, atol=0)


def test_prefix_signature_refuses_a_large_result_before_allocating():
    X = random_windows(4, 5, 10, seed=7)
    ids = np.arange(1000)  # 1000^3 float64 = 7.45 GiB
    tracemalloc.start()
    try:
        with pytest.raises(TooLargeError, match=r"prefix signature of shape \(1000, 1000, 1000\) needs 7.45 GiB"):
            prefix_signature(X, ids, ids, ids)
        with pytest.raises(TooLargeError, match="fewer tokens, labels or context"):
            prefix_signature(X, ids[:10], ids[:10], ids[:10], max_bytes=7999)
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()
    assert prefix_signature(X, ids[:10], ids[:10], ids[:10], max_bytes=8000).shape == (10, 10, 10)


@pytest.mark.parametrize("windows,tokens,needle", [
    (np.zeros((3, 1), dtype=np.int64), [0], "T >= 2"),
    (np.zeros(6, dtype=np.int64), [0], r"windows must have shape \(n_samples, seq_len\)"),
    (np.zeros((3, 2)), [0], "windows must hold integer token ids"),
    (np.array([[0, -1]]), [0], "windows contains token id -1"),
    (np.zeros((3, 2), dtype=np.int64), [-2], "tokens contains token id -2"),
    (np.zeros((3, 2), dtype=np.int64), [1, 1], "tokens contains duplicate token ids"),
    (np.zeros((3, 2), dtype=np.int64), [], "tokens must be a non-empty 1-D list"),
    (np.zeros((3, 2), dtype=np.int64), [0.5], "tokens must be a non-empty 1-D list of integer"),
])
def test_prefix_signature_refuses_bad_input(windows, tokens, needle):
    with pytest.raises(InputError, match=needle):
        prefix_signature(windows, np.array(tokens), np.array([0]), np.array([0]))


def test_counting_in_pieces_changes_nothing(monkeypatch, tmp_path):
    """NextTokenCounts.add, next_token_occurrence and prefix_signature check and count their windows
    piece by piece: pieces of 7 tokens give the one-piece results exactly, also from
    an int32 np.memmap on disk."""
    from ctxstair.signatures import next_token

    rng = np.random.default_rng(5)
    windows = rng.integers(0, 30, size=(200, 9))
    weights = rng.random(200)
    tokens, labels, context = np.arange(0, 30, 2), np.arange(1, 30, 3), np.arange(0, 30, 5)
    whole = (next_token_signature(windows, 30, tokens, labels), next_token_signature(windows, 30, weights=weights),
             next_token_occurrence(windows, 30), prefix_signature(windows, tokens, labels, context))
    stored = np.memmap(tmp_path / "windows.i32", dtype=np.int32, mode="w+", shape=windows.shape)
    stored[:] = windows
    monkeypatch.setattr(next_token, "CHUNK_TOKENS", 7)
    for source in (windows, stored):
        pieces = (next_token_signature(source, 30, tokens, labels), next_token_signature(source, 30, weights=weights),
                  next_token_occurrence(source, 30), prefix_signature(source, tokens, labels, context))
        np.testing.assert_array_equal(pieces[0], whole[0])
        np.testing.assert_allclose(pieces[1], whole[1], rtol=1e-12)  # weighted sums in another order
        np.testing.assert_array_equal(pieces[2], whole[2])
        np.testing.assert_array_equal(pieces[3], whole[3])


def test_prefix_counts_added_into_out_piece_by_piece_equal_one_call():

    rng = np.random.default_rng(7)
    windows = rng.integers(0, 30, size=(40, 12))
    tokens, labels = np.arange(0, 30, 3), np.arange(0, 30, 2)
    whole = prefix_module.prefix_counts(windows, tokens, labels, tokens)
    out = (np.zeros(whole[0].shape), np.zeros(tokens.size))
    for piece in (windows[:13], windows[13:]):
        assert prefix_module.prefix_counts(piece, tokens, labels, tokens, out=out)[0] is out[0]
    np.testing.assert_array_equal(out[0], whole[0])
    np.testing.assert_array_equal(out[1], whole[1])
    with pytest.raises(InputError, match="out must be"):
        prefix_module.prefix_counts(windows, tokens, labels, tokens, out=(np.zeros(3), np.zeros(tokens.size)))

"""Probability signatures of a dataset: occurrence, label and co-occurrence signatures (SPEC §2).

Definitions (SPEC §2). Pick a position ``I`` uniformly and condition on ``x_I = α``; the other
``L-1`` positions are the context, from which an ordered tuple of ``m`` distinct positions
``(J_1..J_m)`` is drawn uniformly.

* occurrence          ``r_α = E[N_α(X)] / L``
* label signature     ``φ^{y;m}_α(ν, β_1..β_m) = P(y = ν, x_{J_1} = β_1, .., x_{J_m} = β_m | x_I = α)``
* co-occurrence       ``φ^m_α(β_1..β_m)        = P(x_{J_1} = β_1, .., x_{J_m} = β_m | x_I = α)``

Estimation: every occurrence of ``α`` (each sample, each position holding ``α``) counts once, with
the sample's weight; within an occurrence every ordered tuple of distinct other positions counts
``1 / (L-1)(L-2)..(L-m)``; the total is divided by the (weighted) number of occurrences of ``α``.

How it is vectorised: the sum over occurrences and tuples is a sum over ordered tuples of distinct
positions ``(i, j_1..j_m)`` — ``L!/(L-m-1)!`` of them — of one indicator per sample. For each such
position tuple the flat index ``(α, ν, β_1..β_m)`` of every sample is computed at once, and all of
them are histogrammed with one ``np.bincount`` per chunk. The cost is
``n · L!/(L-m-1)!`` index operations, independent of the vocabulary; the result is dense.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ctxstair.checks import (
    check_dense_size,
    check_id_subset,
    check_labels,
    check_order,
    check_sequences,
    check_vocab_size,
    check_vocab_tables,
    check_weights,
)

#: Upper bound on the number of index entries built at once (memory ≈ 8 bytes each, a few copies).
_CHUNK_ENTRIES = 1 << 22

_RESTRICT_HINT = "restrict it with tokens=, labels= or context= (subsets of token ids)"


def occurrence(X: np.ndarray, vocab_size: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Occurrence ``r_α = E[N_α(X)] / L`` of every token (SPEC §2).

    Args:
        X: int (n, L) token ids in ``0..vocab_size-1``.
        vocab_size: V.
        weights: optional (n,) non-negative sample weights (default: all 1).

    Returns:
        float64 (V,), summing to 1.
    """
    vocab_size = check_vocab_size(vocab_size)
    X = check_sequences(X, vocab_size)
    w = check_weights(weights, X.shape[0])
    check_vocab_tables(vocab_size)
    counts = _weighted_token_counts(X, w, vocab_size)
    return counts / (X.shape[1] * w.sum())


def label_signature(
    X: np.ndarray,
    y: np.ndarray,
    order: int,
    vocab_size: int,
    tokens: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    context: np.ndarray | None = None,
    weights: np.ndarray | None = None,
    max_bytes: int | None = None,
) -> np.ndarray:
    """Order-m label signature ``φ^{y;m}_α(ν, β_1..β_m)`` (SPEC §2).

    Args:
        X: int (n, L) token ids; y: int (n,) labels; both in ``0..vocab_size-1``.
        order: m, ``0 <= m <= L-1``.
        vocab_size: V.
        tokens: optional id subset selecting the conditioning tokens ``α`` (default: all V ids).
            A subset selects entries of the full signature; nothing is renormalised.
        labels: optional id subset selecting the labels ``ν`` (default: all V ids).
        context: optional id subset selecting the context tokens ``β`` (default: all V ids).
        weights: optional (n,) non-negative sample weights.
        max_bytes: memory budget for the dense result (default 2 GiB); a larger request raises
            :class:`~ctxstair.errors.TooLargeError` before anything is allocated.

    Returns:
        float64 array ``(len(tokens), len(labels), *[len(context)] * order)``. The row of a token
        that never occurs is all zeros (mask with ``occurrence(X, V)[tokens] > 0``); with full
        subsets every other row sums to 1.
    """
    vocab_size = check_vocab_size(vocab_size)
    X = check_sequences(X, vocab_size)
    y = check_labels(y, X.shape[0], vocab_size)
    return _signature(X, y, order, vocab_size, tokens, labels, context, weights, max_bytes)


def cooccurrence_signature(
    X: np.ndarray,
    order: int,
    vocab_size: int,
    tokens: np.ndarray | None = None,
    context: np.ndarray | None = None,
    weights: np.ndarray | None = None,
    max_bytes: int | None = None,
) -> np.ndarray:
    """Order-m co-occurrence signature ``φ^m_α(β_1..β_m)`` (SPEC §2).

    Same arguments as :func:`label_signature` without the labels. Order 0 is the trivial
    signature: 1 for every token that occurs, 0 otherwise.

    Returns:
        float64 array ``(len(tokens), *[len(context)] * order)``.
    """
    vocab_size = check_vocab_size(vocab_size)
    X = check_sequences(X, vocab_size)
    return _signature(X, None, order, vocab_size, tokens, None, context, weights, max_bytes)


def _signature(X, y, order, vocab_size, tokens, labels, context, weights, max_bytes) -> np.ndarray:
    """Shared estimator; ``y is None`` gives the co-occurrence signature."""
    n, L = X.shape
    order = check_order(order, L)
    w = check_weights(weights, n)
    uniform = weights is None
    check_vocab_tables(vocab_size)  # before check_id_subset builds arange(V)
    tokens = check_id_subset(tokens, vocab_size, "tokens")
    context = check_id_subset(context, vocab_size, "context")
    axes = [tokens.size]
    if y is not None:
        labels = check_id_subset(labels, vocab_size, "labels")
        axes.append(labels.size)
    shape = tuple(axes) + (context.size,) * order
    what = f"order-{order} {'label' if y is not None else 'co-occurrence'} signature"
    check_dense_size(shape, max_bytes, what, _RESTRICT_HINT)

    # Ids outside a subset go to one extra "excluded" slot on that axis, sliced off at the end:
    # cheaper than masking every index array.
    token_pos, token_axis = _positions(tokens, vocab_size)
    context_pos, context_axis = _positions(context, vocab_size)
    sample_part, label_axis = np.zeros(n, dtype=np.int64), 1
    if y is not None:
        label_pos, label_axis = _positions(labels, vocab_size)
        sample_part = label_pos[y]
    size = token_axis * label_axis * context_axis**order
    totals = np.zeros(size)
    for tuples in _position_tuple_chunks(L, order, n):
        # tuples: (k, order+1) positions (i, j_1..j_m); flat index of (α, ν, β_1..β_m) for all k × n.
        flat = token_pos[X[:, tuples[:, 0]]] * label_axis + sample_part[:, None]  # (n, k)
        for r in range(1, order + 1):
            flat = flat * context_axis + context_pos[X[:, tuples[:, r]]]
        if uniform:  # unweighted counting is several times faster than weighted bincount
            totals += np.bincount(flat.ravel(), minlength=size)
        else:
            totals += np.bincount(flat.ravel(), weights=np.broadcast_to(w[:, None], flat.shape).ravel(), minlength=size)
    extended = (token_axis, label_axis) + (context_axis,) * order
    kept = (tokens.size, labels.size if y is not None else 1) + (context.size,) * order
    totals = totals.reshape(extended)[tuple(slice(k) for k in kept)].reshape(tokens.size, -1)

    occurrences = _weighted_token_counts(X, w, vocab_size)[tokens]
    denominator = occurrences * math.perm(L - 1, order)
    np.divide(totals, denominator[:, None], out=totals, where=denominator[:, None] > 0)
    return totals.reshape(shape)


def _positions(subset: np.ndarray, vocab_size: int) -> tuple[np.ndarray, int]:
    """Map token id -> index within ``subset``, ids outside it -> ``len(subset)`` (the excluded slot).

    Returns the (V,) map and the axis length including the excluded slot when one is needed.
    """
    partial = subset.size < vocab_size
    pos = np.full(vocab_size, subset.size, dtype=np.int64)
    pos[subset] = np.arange(subset.size)
    return pos, subset.size + partial


def _weighted_token_counts(X: np.ndarray, w: np.ndarray, vocab_size: int) -> np.ndarray:
    """``Σ_n w_n N_α(X_n)`` for every token α; float64 (V,)."""
    return np.bincount(X.ravel(), weights=np.repeat(w, X.shape[1]), minlength=vocab_size)


def _position_tuple_chunks(L: int, order: int, n: int):
    """Yield int64 arrays (k, order+1) of ordered distinct positions, k·n ≲ ``_CHUNK_ENTRIES``."""
    per_chunk = max(1, _CHUNK_ENTRIES // n)
    tuples = itertools.permutations(range(L), order + 1)
    while chunk := list(itertools.islice(tuples, per_chunk)):
        yield np.array(chunk, dtype=np.int64)

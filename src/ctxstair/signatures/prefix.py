"""First-order prefix signature of a corpus of token windows (SPEC §7).

For windows ``X`` (n, T), every position ``s < T-1`` (one that has a next token) is one event:

    ``φ^{y;1}_α(ν, β) = P(x_{s+1} = ν, β ∈ X_{<s} | x_s = α)``

where ``β ∈ X_{<s}`` means β sits anywhere at positions ``< s`` of the same window, counted once
however often it appears. Each α divides by its number of events, so the signature is not
normalised over β; summed over all ν it is the probability that β precedes an occurrence of α.

How it is counted. In one window, a context token β with first occurrence ``f_β`` counts for the
events at ``s > f_β`` and for no other, so

    ``count(α, ν, β) = #{(window, s, β): x_s = α, x_{s+1} = ν, f_β(window) < s}``,

a sum over (event, earlier first occurrence) pairs: about the number of events times the number of
distinct context tokens before them, far fewer than events × len(context). The first occurrences
are found by a stable sort of each window, listed window by window in position order and numbered
by a cumulative sum, so the ones before the event at ``(window, s)`` are one contiguous run of that
list; ``np.repeat`` plus ``np.arange`` expand every event into its run, and the flat index
``(α, ν, β)`` of each pair is added into the result with ``np.add.at`` (fast since numpy 1.25).
Windows go in chunks of at most ``_CHUNK_PAIRS`` possible pairs (and at least one window), so
the working memory does not grow with the number of windows.

Why not ``scipy.sparse``: the product ``A^T B`` (A = events × (α, ν) one-hot, B = events × context
presence) is the same sum, but B's column indices are exactly this pair list, so it costs the same
to build, and then the product (two passes) plus scattering its sparse result into the dense one
took 1.3 s against 0.37 s for ``np.add.at`` on the 41 M pairs of the benchmark in
``benchmarks/corpus_signatures.py`` (building the pairs: 0.3 s either way).

The counts accumulate in the float64 result itself (integers up to 2^53 are exact) and are divided
in place at the end, so the peak memory is one copy of the result plus one chunk.
"""

from __future__ import annotations

import numpy as np

from ctxstair.checks import as_array, check_dense_size, check_id_subset, check_vocab_tables
from ctxstair.errors import InputError
from ctxstair.signatures.next_token import window_chunks

#: Most (event, earlier context token) pairs built at once: arrays of 8 bytes x this, a few copies.
_CHUNK_PAIRS = 1 << 22


def prefix_signature(windows: np.ndarray, tokens: np.ndarray, labels: np.ndarray, context: np.ndarray,
                     max_bytes: int | None = None) -> np.ndarray:
    """First-order prefix signature ``φ^{y;1}_α(ν, β) = P(x_{s+1} = ν, β ∈ X_{<s} | x_s = α)`` (SPEC §7).

    Args:
        windows: int (n, T) token ids, one row per training window, T >= 2.
        tokens: int id array selecting ``α`` (any non-negative ids, in any order, no duplicates;
            an id that never occurs in ``windows`` is allowed and gets zeros).
        labels: int id array selecting ``ν``, the same way.
        context: int id array selecting ``β``, the same way.
        max_bytes: memory budget for the dense result (default 2 GiB); a larger request raises
            :class:`~ctxstair.errors.TooLargeError` before anything is allocated.

    Returns:
        float64 (len(tokens), len(labels), len(context)) indexed ``(α, ν, β)``: the number of
        positions ``s < T-1`` with ``x_s = α``, ``x_{s+1} = ν`` and ``β`` among ``x_0..x_{s-1}``,
        divided by the number of positions ``s < T-1`` with ``x_s = α``. Rows of tokens with no
        such position are zero (mask them with ``next_token_occurrence(windows, V)[tokens] > 0``).
        The counts themselves, for corpora counted elsewhere and summed: :func:`prefix_counts`.
    """
    counts, events = prefix_counts(windows, tokens, labels, context, max_bytes)
    # A token with no event has no counts either, so dividing its zeros by 1 leaves them.
    counts /= np.maximum(events, 1)[:, None, None]
    return counts


def prefix_counts(windows: np.ndarray, tokens: np.ndarray, labels: np.ndarray, context: np.ndarray,
                  max_bytes: int | None = None, out: tuple[np.ndarray, np.ndarray] | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The integer counts behind :func:`prefix_signature` (SPEC §7), exact in float64 up to 2^53.

    The arguments are those of :func:`prefix_signature`, and ``out``: float64 ``(counts, events)`` of
    the shapes below to add this call's counts into (a corpus counted piece by piece allocates its
    result once).

    Returns:
        ``(counts, events)``: float64 (len(tokens), len(labels), len(context)), the number of positions
        ``s < T-1`` with ``x_s = α``, ``x_{s+1} = ν`` and ``β`` among ``x_0..x_{s-1}``; and float64
        (len(tokens),), the number of positions ``s < T-1`` with ``x_s = α``. Counts of several
        corpora add up; the signature is ``counts / events``.
    """
    windows = as_array(windows, "windows")
    subsets = [as_array(ids, name) for ids, name in zip((tokens, labels, context), ("tokens", "labels", "context"))]
    # No vocabulary size is given: ids range over 0..(the largest id passed), so only negative ids,
    # wrong dtypes, shapes and duplicates are refused.
    bound = 1 + max((int(a.max()) for a in [windows, *subsets] if a.dtype.kind in "iu" and a.size), default=0)
    window_chunks(windows, bound)  # a bad shape or dtype is refused now; ids are checked piece by piece below
    tokens, labels, context = (check_id_subset(ids, bound, name)
                               for ids, name in zip(subsets, ("tokens", "labels", "context")))
    shape = (tokens.size, labels.size, context.size)
    check_dense_size(shape, max_bytes, "prefix signature", "pass fewer tokens, labels or context ids")
    check_vocab_tables(bound)
    # id -> index within each subset, -1 outside it; ids that do not occur in windows need no slot.
    present = bound  # ids that occur in windows are below it
    token_index, label_index, context_index = (_index_of(ids, present) for ids in (tokens, labels, context))
    counts, events = out if out is not None else (np.zeros(shape), np.zeros(tokens.size))
    if (counts.shape, events.shape) != (shape, (tokens.size,)) or {counts.dtype, events.dtype} != {np.dtype(float)} \
            or not counts.flags.c_contiguous:
        raise InputError(f"out must be float64 arrays of shapes {shape} and {(tokens.size,)}, the first contiguous")
    flat_counts = counts.reshape(-1)  # a view of the contiguous counts, added into in place
    T = windows.shape[1]
    # A window has T-1 events with at most min(T-2, len(context)) pairs each; T also bounds its tokens.
    _, pieces = window_chunks(windows, bound,
                              chunk_tokens=T * max(1, _CHUNK_PAIRS // (T * max(1, min(T - 2, context.size)))))
    for _, chunk in pieces:  # int64 rows, converted one piece at a time
        alpha, nu = token_index[chunk[:, :-1]], label_index[chunk[:, 1:]]  # (r, T-1) each
        events += np.bincount(alpha[alpha >= 0], minlength=tokens.size)
        first_beta, before = _first_occurrences(context_index[chunk])
        r, s = np.nonzero((alpha >= 0) & (nu >= 0))
        # The first occurrences before (r, s) are first_beta[before[r, 0]:before[r, s]].
        lo = before[r, 0]
        n_pairs = before[r, s] - lo
        run_start = np.cumsum(n_pairs) - n_pairs
        pair = np.repeat(lo - run_start, n_pairs)
        pair += np.arange(pair.size)
        flat = np.repeat((alpha[r, s] * labels.size + nu[r, s]) * context.size, n_pairs)
        flat += first_beta[pair]
        np.add.at(flat_counts, flat, 1.0)
    return counts, events


def _index_of(ids: np.ndarray, present: int) -> np.ndarray:
    """(present,) map: token id -> its index in ``ids``, -1 when it is not in ``ids``."""
    index = np.full(present, -1, dtype=np.int64)
    inside = ids < present
    index[ids[inside]] = np.flatnonzero(inside)
    return index


def _first_occurrences(beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First occurrences of the context tokens in each row of ``beta`` int (r, T) (context index, -1
    for other tokens).

    Returns ``first_beta`` (k,), the context index of every first occurrence, row by row and in
    position order within a row, and ``before`` int (r, T): the number of entries of ``first_beta``
    that come before position ``(row, s)`` — those of earlier rows and of positions ``< s``.
    """
    # A stable sort of each row groups equal tokens with their positions ascending: the first of
    # each group is its first occurrence.
    order = np.argsort(beta, axis=1, kind="stable")
    grouped = np.take_along_axis(beta, order, axis=1)
    starts = grouped >= 0
    starts[:, 1:] &= grouped[:, 1:] != grouped[:, :-1]
    is_first = np.empty_like(starts)
    np.put_along_axis(is_first, order, starts, axis=1)
    before = np.cumsum(is_first, axis=None).reshape(beta.shape) - is_first
    return beta[is_first], before

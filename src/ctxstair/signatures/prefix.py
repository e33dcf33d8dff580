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
distinct context tokens before them, far fewer than events × len(context). A compiled loop
(:func:`ctxstair.signatures.kernels.add_prefix_pairs`) walks each window once, keeps the context
tokens met so far in order of first occurrence and adds one to each of them in the event's (α, ν)
row. The numpy passes it replaced (a stable sort of every window for the first occurrences, a
cumulative sum, ``np.repeat`` of every event into its pairs, then ``np.add.at``) ran at a third of
its speed; the scatter alone of the same pairs with ``np.add.at`` is slower than the whole loop.
Windows go in pieces of :data:`~ctxstair.signatures.next_token.CHUNK_TOKENS` tokens, each checked
and converted on its own, so the working memory does not grow with the number of windows.

The counts accumulate in the float64 result itself (integers up to 2^53 are exact) and are divided
in place at the end, so the peak memory is one copy of the result plus one chunk.
"""

from __future__ import annotations

import numpy as np

from ctxstair.checks import as_array, check_dense_size, check_id_subset, check_vocab_tables
from ctxstair.errors import InputError
from ctxstair.signatures.next_token import window_chunks


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
    from ctxstair.signatures import kernels  # numba is imported only when something is counted

    # id -> index within each subset, -1 outside it; ids that do not occur in windows need no slot.
    token_index, label_index, context_index = (index_map(ids, bound) for ids in (tokens, labels, context))
    counts, events = out if out is not None else (np.zeros(shape), np.zeros(tokens.size))
    if (counts.shape, events.shape) != (shape, (tokens.size,)) or {counts.dtype, events.dtype} != {np.dtype(float)} \
            or not counts.flags.c_contiguous:
        raise InputError(f"out must be float64 arrays of shapes {shape} and {(tokens.size,)}, the first contiguous")
    for _, chunk in window_chunks(windows, bound)[1]:  # int64 rows, checked and converted one piece at a time
        kernels.add_prefix_pairs(chunk, token_index, label_index, context_index, counts, events)
    return counts, events


def index_map(ids: np.ndarray, size: int) -> np.ndarray:
    """int32 (size,) map: token id -> its index in ``ids`` (int, distinct, non-negative), -1 for ids not
    in ``ids``; ids of ``ids`` at or above ``size`` get no slot (they cannot occur in the windows counted)."""
    index = np.full(size, -1, dtype=np.int32)
    inside = ids < size
    index[ids[inside]] = np.flatnonzero(inside)
    return index

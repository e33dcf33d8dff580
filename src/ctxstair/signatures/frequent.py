"""The most frequent ids of a count vector: the selection rule behind the LM token set T and the
prefix labels (SPEC §7), shared by counts held in memory and counts summed over a sharded corpus."""

from __future__ import annotations

import numpy as np

from ctxstair.checks import int_in_range
from ctxstair.errors import InputError


def most_frequent(counts: np.ndarray, k: int, *, eligible: np.ndarray | None = None,
                  exclude: np.ndarray | None = None) -> np.ndarray:
    """The ``k`` ids with the largest counts, most frequent first; equal counts go to the smaller id.

    Args:
        counts: (V,) non-negative counts (integers or floats).
        k: how many ids, >= 0.
        eligible: optional bool (V,): only these ids may be chosen.
        exclude: optional int ids that are never chosen.

    Returns:
        int64 (k',) ids with a positive count, ``k' <= k`` (fewer when fewer ids qualify).
    """
    counts = np.asarray(counts)
    if counts.ndim != 1:
        raise InputError(f"counts must be a 1-D vector over the vocabulary, got shape {counts.shape}")
    k = int_in_range("k", k, 0)
    allowed = counts > 0
    if eligible is not None:
        mask = np.asarray(eligible)
        if mask.dtype != bool or mask.shape != counts.shape:
            raise InputError(f"eligible must be a boolean mask of shape {counts.shape}, got {mask.dtype} {mask.shape}")
        allowed &= mask
    if exclude is not None:
        allowed[np.asarray(exclude, dtype=np.int64)] = False
    ids = np.flatnonzero(allowed)
    order = np.lexsort((ids, -counts[ids].astype(np.float64)))[:k]  # by count descending, then by id
    return ids[order].astype(np.int64)


def label_set(next_counts: np.ndarray, tokens: np.ndarray, total: int) -> np.ndarray:
    """Labels ``ν`` of the prefix signature (SPEC §7): the tokens themselves and the most frequent
    next tokens, ``total`` in all (``len(tokens)`` when ``total`` is smaller).

    Args:
        next_counts: (V,) how often each id sits at a position that follows another token.
        tokens: int (k,) the token set, always included.
        total: size of the label set, >= 1.

    Returns:
        int64 sorted label ids.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    total = int_in_range("total", total, 1)
    frequent = most_frequent(next_counts, max(0, total - tokens.size), exclude=tokens)
    return np.sort(np.concatenate([tokens, frequent]))

"""Compiled counting loops (numba) behind the next-token rows and the prefix counts (SPEC §7).

One loop per statistic, over the windows as they are stored (uint16, int32, int64, ...), with no
intermediate array: numpy needed a gather and a scatter per position for the rows, and, for the
prefix counts, a sort of every window, a cumulative sum and ``np.repeat`` of every event into its
pairs before the scatter (60 % of the time); here each position is read once and each count added
where it is found.

This module imports numba; it is imported only when something is counted (``from
ctxstair.signatures import kernels`` inside the counting functions), so a program that imports
ctxstair without counting never pays numba's import (≈ 0.3 s).

Compilation: each loop is compiled on its first call for the dtypes it is given (≈ 1–2 s per
loop and dtype combination on one core) and cached (``cache=True``) in ``__pycache__`` next to this
file, or, where that folder cannot be written (a read-only install), in numba's user cache
(``~/.cache/numba``, or ``NUMBA_CACHE_DIR``); a later process, a spawned worker included, loads it
from there in about 0.1 s.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def add_next_rows(windows: np.ndarray, row_of: np.ndarray, rows: np.ndarray) -> None:  # pragma: no cover
    """Add the next-token pairs of ``windows`` into ``rows`` in place (SPEC §7).

    Args:
        windows: int (r, T) token ids, each below ``len(row_of)`` and ``rows.shape[1]`` (checked by the caller).
        row_of: int (V,): the row of each tracked id, -1 for the others.
        rows: int (k, V): ``rows[row_of[x_s], x_{s+1}] += 1`` for every ``s < T-1`` whose ``x_s`` is tracked.
    """
    n, T = windows.shape
    for i in range(n):
        for s in range(T - 1):
            row = row_of[windows[i, s]]
            if row >= 0:
                rows[row, windows[i, s + 1]] += 1


@numba.njit(cache=True, nogil=True)
def add_prefix_pairs(windows: np.ndarray, token_index: np.ndarray, label_index: np.ndarray,
                     context_index: np.ndarray, counts: np.ndarray, events: np.ndarray) -> None:  # pragma: no cover
    """Add the first-order prefix counts of ``windows`` into ``counts`` and ``events`` in place (SPEC §7).

    Args:
        windows: int (r, T) token ids, each below the length of the three index maps (checked by the caller).
        token_index, label_index, context_index: int (V,): each id's index among the tokens ``α``,
            the labels ``ν`` and the context ``β``, -1 outside them.
        counts: (len(tokens), len(labels), len(context)), any numeric dtype: ``counts[α, ν, β] += 1`` for
            every position ``s < T-1`` with ``x_s = α``, ``x_{s+1} = ν`` and ``β`` among ``x_0..x_{s-1}``.
        events: (len(tokens),): ``events[α] += 1`` for every position ``s < T-1`` with ``x_s = α``.

    Walking a window left to right, the distinct context tokens met so far are kept in order of first
    occurrence (``seen`` marks them with the window's number, so nothing is cleared between windows);
    an event adds one to each of them in its (α, ν) row, ``len(context)`` counts side by side.
    """
    n, T = windows.shape
    seen = np.full(counts.shape[2], -1, dtype=np.int64)
    earlier = np.empty(min(T, counts.shape[2]), dtype=np.int64)
    for i in range(n):
        n_earlier = 0
        for s in range(T - 1):
            x = windows[i, s]
            alpha = token_index[x]
            if alpha >= 0:
                events[alpha] += 1
                nu = label_index[windows[i, s + 1]]
                if nu >= 0:
                    for j in range(n_earlier):
                        counts[alpha, nu, earlier[j]] += 1
            beta = context_index[x]
            if beta >= 0 and seen[beta] != i:
                seen[beta] = i
                earlier[n_earlier] = beta
                n_earlier += 1

"""The compiled counting loops (ctxstair.signatures.kernels) against brute-force references written
here: random windows in every stored dtype, the empty input, windows of 2 and 3 tokens (shorter than
the context), untracked tokens and the largest id."""

from __future__ import annotations

import numpy as np
import pytest

from ctxstair.signatures import kernels
from ctxstair.signatures.prefix import index_map


def brute_next_rows(windows: np.ndarray, tokens: list[int], V: int) -> np.ndarray:
    rows = np.zeros((len(tokens), V), dtype=np.int64)
    for window in windows.tolist():
        for s in range(len(window) - 1):
            if window[s] in tokens:
                rows[tokens.index(window[s]), window[s + 1]] += 1
    return rows


def brute_prefix(windows: np.ndarray, tokens: list[int], labels: list[int], context: list[int]
                 ) -> tuple[np.ndarray, np.ndarray]:
    counts = np.zeros((len(tokens), len(labels), len(context)), dtype=np.int64)
    events = np.zeros(len(tokens), dtype=np.int64)
    for window in windows.tolist():
        for s in range(len(window) - 1):
            if window[s] not in tokens:
                continue
            events[tokens.index(window[s])] += 1
            if window[s + 1] not in labels:
                continue
            for beta in set(window[:s]) & set(context):
                counts[tokens.index(window[s]), labels.index(window[s + 1]), context.index(beta)] += 1
    return counts, events


def kernel_counts(windows, tokens, labels, context, V, dtype):
    rows = np.zeros((len(tokens), V), dtype=np.int64)
    kernels.add_next_rows(windows, index_map(np.array(tokens), V), rows)
    counts = np.zeros((len(tokens), len(labels), len(context)), dtype=dtype)
    events = np.zeros(len(tokens), dtype=dtype)
    kernels.add_prefix_pairs(windows, *(index_map(np.array(ids), V) for ids in (tokens, labels, context)), counts,
                             events)
    return rows, counts, events


@pytest.mark.parametrize("stored", [np.uint16, np.int32, np.uint32, np.int64])
@pytest.mark.parametrize("shape", [(0, 6), (1, 2), (9, 2), (13, 3), (40, 17)])
def test_kernels_equal_brute_force(stored, shape):
    V = 23
    rng = np.random.default_rng(shape[0] * 100 + shape[1])
    windows = rng.integers(0, V, size=shape).astype(stored)
    windows[::3, -1] = V - 1  # the largest id, as a next token and in the context
    tokens, labels, context = [V - 1, 0, 4, 9, 2], [3, V - 1, 0, 9, 11, 4], [9, 4, V - 1, 1, 0, 7, 12, 2]
    for dtype in (np.int32, np.float64):  # a unit's counts and prefix_counts' float64 result
        rows, counts, events = kernel_counts(windows, tokens, labels, context, V, dtype)
        np.testing.assert_array_equal(rows, brute_next_rows(windows, tokens, V))
        expected_counts, expected_events = brute_prefix(windows, tokens, labels, context)
        np.testing.assert_array_equal(counts, expected_counts)
        np.testing.assert_array_equal(events, expected_events)


def test_kernels_add_into_their_arrays_and_leave_untracked_tokens_out():
    V = 50
    windows = np.array([[1, 2, 3, 1, 2], [4, 4, 1, 49, 2]], dtype=np.uint16)
    rows, counts, events = kernel_counts(windows, [1, 2], [2, 49], [1, 4], V, np.int64)
    kernels.add_next_rows(windows, index_map(np.array([1, 2]), V), rows)  # a second time: added
    assert rows.sum() == 2 * 4 and rows[0, 2] == 2 * 2 and rows[0, 49] == 2 and rows[1, 3] == 2
    # α = 1 at (0, 3) with ν = 2, β = 1 before it; at (1, 2) with ν = 49, β = 4 before it (once, not twice).
    assert counts[0, 0].tolist() == [1, 0] and counts[0, 1].tolist() == [0, 1] and events.tolist() == [3, 1]


def test_a_context_longer_than_any_window():
    """The list of earlier context tokens holds min(T, len(context)): every one of T distinct ids fits."""
    V = 60
    windows = np.arange(V, dtype=np.int64).reshape(2, 30)
    everything = list(range(V))
    _, counts, events = kernel_counts(windows, everything, everything, everything, V, np.int32)
    expected_counts, expected_events = brute_prefix(windows, everything, everything, everything)
    np.testing.assert_array_equal(counts, expected_counts)
    np.testing.assert_array_equal(events, expected_events)


def test_importing_ctxstair_does_not_import_numba():
    """A library that runs inside someone else's training pays numba's import only when it counts (or
    gathers embeddings in the ensemble engine on the CPU)."""
    import subprocess
    import sys

    code = ("import sys, ctxstair.corpus, ctxstair.signatures, ctxstair.monitor, ctxstair.models, ctxstair.train; "
            "print('numba' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"

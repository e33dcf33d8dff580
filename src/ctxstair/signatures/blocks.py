"""Next-token pair counts of chosen rows, per block of positions: what the word-group bootstrap of
``ctxstair semantics`` resamples (SPEC §7), counted the same way over a text held in memory and over
the windows of a sharded corpus."""

from __future__ import annotations

import numpy as np

from ctxstair.checks import int_in_range


def block_pair_counts(windows: np.ndarray, row_tokens: list[list[int]], block_tokens: int,
                      first_position: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Counts of the pairs ``(x_s, x_{s+1})`` inside each window whose first token serves a row, by
    block: the pair at position ``p`` belongs to block ``p // block_tokens``, positions numbering the
    windows' tokens one after another from ``first_position``.

    Args:
        windows: int (n, W) token ids >= 0 (a text: one window, its whole stream ``ids[None, :]``).
        row_tokens: per row (e.g. a word), the token ids pooled into it; a token may serve several rows.
        block_tokens: positions per block, >= 1.
        first_position: the position of ``windows[0, 0]`` (a unit of a larger corpus starts later).

    Returns:
        ``(block, row, next, count)``, int64 (K,) each, one entry per (block, row, next token) that
        occurs, sorted by (block, row, next token).
    """
    block_tokens = int_in_range("block_tokens", block_tokens, 1)
    X = np.asarray(windows, dtype=np.int64)
    n, W = X.shape
    pair_token = np.array([t for tokens in row_tokens for t in tokens], dtype=np.int64)
    pair_row = np.array([r for r, tokens in enumerate(row_tokens) for _ in tokens], dtype=np.int64)
    order = np.argsort(pair_token, kind="stable")
    pair_token, pair_row = pair_token[order], pair_row[order]
    window, s = np.nonzero(np.isin(X[:, :-1], pair_token))
    first = X[window, s]
    # Expand each position into one entry per row its token serves (usually exactly one).
    left = np.searchsorted(pair_token, first, side="left")
    repeats = np.searchsorted(pair_token, first, side="right") - left
    entry = np.repeat(left - np.cumsum(repeats) + repeats, repeats) + np.arange(repeats.sum())
    window, s = np.repeat(window, repeats), np.repeat(s, repeats)
    block = (first_position + window * W + s) // block_tokens
    columns = [block, pair_row[entry], X[window, s + 1]]
    keys, count = np.unique(np.stack(columns), axis=1, return_counts=True)
    return keys[0], keys[1], keys[2], count.astype(np.int64)

"""Next-token statistics of a corpus of token windows (SPEC §6.4, §7).

For windows ``X`` (n, T) every position ``s < T-1`` gives one pair ``(x_s, x_{s+1})``:

* next-token occurrence  ``r^nt_α = P(x_s = α)`` (fraction of the pairs whose first token is α):
  :func:`next_token_occurrence`;
* next-token signature   ``φ^{y;nt}_α(ν) = P(x_{s+1} = ν | x_s = α)``: :func:`next_token_signature`.

A corpus too large for one array is counted chunk by chunk with :class:`NextTokenCounts` (``add``
each (n_i, T_i) chunk, then ``occurrence()`` and ``signature()``). Counts are float64, so per-window
weights enter exactly like the unweighted case. The dense signature has ``len(tokens) ×
len(labels)`` entries; over a real vocabulary pass ``tokens=`` (which α) and the size is checked
before anything is allocated.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ctxstair.checks import (
    as_array,
    check_dense_size,
    check_id_subset,
    check_sequences,
    check_vocab_size,
    check_vocab_tables,
    check_weights,
)
from ctxstair.errors import InputError

#: Tokens per piece when windows are checked and counted piecewise (:func:`window_chunks`): the
#: working memory of counting (tens of bytes per token) stays bounded whatever the corpus size.
CHUNK_TOKENS = 1 << 20


def check_windows(windows: object, vocab_size: int) -> np.ndarray:
    """Check int token windows (n, T) with ids in [0, vocab_size) and T >= 2 (a next token exists)."""
    windows = check_sequences(windows, vocab_size, "windows")
    if windows.shape[1] < 2:
        raise InputError(f"windows need length T >= 2 to hold a next token, got shape {windows.shape}")
    return windows


def window_chunks(windows: object, vocab_size: int, chunk_tokens: int | None = None
                  ) -> tuple[int, Iterator[tuple[int, np.ndarray]]]:
    """Check windows (n, T) piece by piece: return n and an iterator of ``(start, chunk)``, ``chunk``
    the checked int64 rows ``start:start + r`` of about ``chunk_tokens`` tokens (default
    :data:`CHUNK_TOKENS`). The shape and dtype
    are checked at once, the ids piece by piece; only one piece is ever converted to int64, so an
    int32 array or a disk-backed ``np.memmap`` of any length costs no full copy."""
    arr = as_array(windows, "windows")
    if arr.ndim != 2 or arr.dtype.kind not in "iu" or 0 in arr.shape or arr.shape[1] < 2:
        check_windows(arr, vocab_size)  # raises the message for the whole array
    rows = max(1, (chunk_tokens or CHUNK_TOKENS) // arr.shape[1])
    return arr.shape[0], ((start, check_windows(arr[start:start + rows], vocab_size))
                          for start in range(0, arr.shape[0], rows))


class NextTokenCounts:
    """Accumulates next-token pair counts over chunks of windows.

    Args:
        vocab_size: V.
        tokens: optional id subset: which first tokens ``α`` (rows) the signature keeps (default:
            all V).
        labels: optional id subset: which next tokens ``ν`` (columns) it keeps (default: all V).
            Nothing is renormalised: a row still divides by all pairs starting with ``α``.
        max_bytes: memory budget of the dense (len(tokens), len(labels)) float64 counts (default
            2 GiB); a larger request raises :class:`~ctxstair.errors.TooLargeError` here.

    Example::

        counts = NextTokenCounts(V, tokens=frequent)
        for chunk in chunks:          # int (n_i, T_i) windows
            counts.add(chunk)
        r_nt, phi_nt = counts.occurrence(), counts.signature()
    """

    def __init__(self, vocab_size: int, tokens: np.ndarray | None = None, labels: np.ndarray | None = None,
                 max_bytes: int | None = None):
        self.vocab_size = check_vocab_size(vocab_size)
        check_vocab_tables(self.vocab_size)  # before check_id_subset builds arange(V)
        self.tokens = check_id_subset(tokens, self.vocab_size, "tokens")
        self.labels = check_id_subset(labels, self.vocab_size, "labels")
        check_dense_size((self.tokens.size, self.labels.size), max_bytes, "next-token signature",
                         "restrict it with tokens= or labels= (subsets of token ids)")
        # Ids outside a subset go to one extra "excluded" row / column, dropped by signature().
        self._row = np.full(self.vocab_size, self.tokens.size, dtype=np.int64)
        self._row[self.tokens] = np.arange(self.tokens.size)
        self._col = np.full(self.vocab_size, self.labels.size, dtype=np.int64)
        self._col[self.labels] = np.arange(self.labels.size)
        self._pairs = np.zeros((self.tokens.size + 1) * (self.labels.size + 1))  # flat (k+1, m+1)
        self._first = np.zeros(self.vocab_size)  # weighted number of pairs starting with each α

    def add(self, windows: np.ndarray, weights: np.ndarray | None = None) -> NextTokenCounts:
        """Count the pairs of windows int (n, T), T >= 2, with optional per-window weights (n,);
        counted in pieces of about :data:`CHUNK_TOKENS` tokens (:func:`window_chunks`), so the
        working memory does not grow with n."""
        n, pieces = window_chunks(windows, self.vocab_size)
        weights = None if weights is None else check_weights(weights, n)
        for start, chunk in pieces:
            w = None if weights is None else _pair_weights(chunk, weights[start:start + chunk.shape[0]])
            first, nxt = chunk[:, :-1].ravel(), chunk[:, 1:].ravel()
            flat = self._row[first] * (self.labels.size + 1) + self._col[nxt]
            self._pairs += np.bincount(flat, weights=w, minlength=self._pairs.size)
            self._first += np.bincount(first, weights=w, minlength=self.vocab_size)
        return self

    def occurrence(self) -> np.ndarray:
        """``r_nt``: float64 (V,), the fraction of the counted pairs starting with each token (sums to 1)."""
        self._require_pairs()
        return self._first / self._first.sum()

    def signature(self) -> np.ndarray:
        """``phi_nt``: float64 (len(tokens), len(labels)) with ``phi_nt[i, j] = P(x_{s+1} = labels[j] |
        x_s = tokens[i])``; rows of tokens never seen at s < T-1 are zero (mask with
        ``occurrence()[tokens] > 0``)."""
        self._require_pairs()
        pairs = self._pairs.reshape(self.tokens.size + 1, self.labels.size + 1)[:-1, :-1]
        rows = self._first[self.tokens][:, None]
        return np.divide(pairs, rows, out=np.zeros_like(pairs), where=rows > 0)

    def _require_pairs(self) -> None:
        if not self._first.any():
            raise InputError("no next-token pairs counted yet: add() at least one chunk of windows")


def next_token_occurrence(windows: np.ndarray, vocab_size: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Next-token occurrence ``r^nt_α = P(x_s = α)`` over the positions ``s < T-1`` (SPEC §6.4).

    Args:
        windows: int (n, T) token ids in ``0..vocab_size-1``, T >= 2.
        vocab_size: V.
        weights: optional (n,) non-negative per-window weights.

    Returns:
        float64 (V,), summing to 1 (the same as :meth:`NextTokenCounts.occurrence`, without the
        pair counts).
    """
    vocab_size = check_vocab_size(vocab_size)
    check_vocab_tables(vocab_size)
    n, pieces = window_chunks(windows, vocab_size)
    weights = None if weights is None else check_weights(weights, n)
    first = np.zeros(vocab_size)
    for start, chunk in pieces:
        w = None if weights is None else _pair_weights(chunk, weights[start:start + chunk.shape[0]])
        first += np.bincount(chunk[:, :-1].ravel(), weights=w, minlength=vocab_size)
    return first / first.sum()


def next_token_signature(windows: np.ndarray, vocab_size: int, tokens: np.ndarray | None = None,
                         labels: np.ndarray | None = None, weights: np.ndarray | None = None,
                         max_bytes: int | None = None) -> np.ndarray:
    """Next-token signature ``φ^{y;nt}_α(ν) = P(x_{s+1} = ν | x_s = α)`` of windows (SPEC §6.4).

    Args:
        windows: int (n, T) token ids in ``0..vocab_size-1``, T >= 2; the pairs are
            ``(x_s, x_{s+1})`` for ``s < T-1``.
        vocab_size: V.
        tokens: optional id subset for ``α`` (rows), default all V.
        labels: optional id subset for ``ν`` (columns), default all V.
        weights: optional (n,) non-negative per-window weights.
        max_bytes: memory budget for the dense result (default 2 GiB).

    Returns:
        float64 (len(tokens), len(labels)), as :meth:`NextTokenCounts.signature`; for a corpus too
        large for one array, ``add`` it chunk by chunk there instead.
    """
    return NextTokenCounts(vocab_size, tokens, labels, max_bytes).add(windows, weights).signature()


def previous_token_signature(windows: np.ndarray, vocab_size: int, tokens: np.ndarray | None = None,
                             labels: np.ndarray | None = None) -> np.ndarray:
    """Previous-token signature ``φ^pre_ν(α) = P(x_s = α | x_{s+1} = ν)`` of windows: the distribution
    of the token before ``ν`` (the statistic the unembedding row of ``ν`` aligns with, SPEC §7).

    It is the next-token signature of the windows read backwards (pair ``(x_{s+1}, x_s)``), so rows
    are the tokens ``ν`` and columns the previous tokens ``α``.

    Args:
        windows: int (n, T) token ids in ``0..vocab_size-1``, T >= 2.
        vocab_size: V.
        tokens: optional id subset for ``ν`` (rows), default all V.
        labels: optional id subset for ``α`` (columns), default all V.

    Returns:
        float64 (len(tokens), len(labels)); the row of a token never seen at a position s >= 1 is zero.
    """
    return next_token_signature(np.asarray(windows)[:, ::-1], vocab_size, tokens, labels)


def _pair_weights(windows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per-pair weights (n·(T-1),) in row-major order from checked per-window weights (n,)."""
    return np.repeat(weights, windows.shape[1] - 1)

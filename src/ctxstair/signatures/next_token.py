"""Next-token signature of a corpus of token windows (SPEC §6.4, §7).

For windows ``X`` (n, T) every position ``s < T-1`` gives one pair ``(x_s, x_{s+1})``:

* next-token occurrence  ``r^nt_α = P(x_s = α)`` (fraction of the pairs whose first token is α);
* next-token signature   ``φ^{y;nt}_α(ν) = P(x_{s+1} = ν | x_s = α)``.

A corpus is counted chunk by chunk with :class:`NextTokenCounts` (``add`` each (n_i, T_i) chunk,
then ``signature()``); :func:`next_token_signature` is the one-array shortcut. Counts are float64,
so a chunk's sample weights enter exactly like the unweighted case. The dense result has
``len(tokens) × len(labels)`` entries; over a real vocabulary pass ``tokens=`` (which α) and the
size is checked before anything is allocated.
"""

from __future__ import annotations

import numpy as np

from ctxstair.checks import check_dense_size, check_id_subset, check_sequences, check_vocab_size, check_weights
from ctxstair.errors import InputError


class NextTokenCounts:
    """Accumulates next-token pair counts over chunks of windows.

    Args:
        vocab_size: V.
        tokens, labels: optional id subsets: which first tokens ``α`` (rows) and which next tokens
            ``ν`` (columns) the signature keeps (default: all V). Nothing is renormalised: a row
            still divides by all pairs starting with ``α``.
        max_bytes: memory budget of the dense (len(tokens), len(labels)) float64 counts (default
            2 GiB); a larger request raises :class:`~ctxstair.errors.TooLargeError` here.

    Example::

        counts = NextTokenCounts(V, tokens=frequent)
        for chunk in chunks:          # int (n_i, T_i) windows
            counts.add(chunk)
        r_nt, phi_nt = counts.signature()
    """

    def __init__(self, vocab_size: int, tokens: np.ndarray | None = None, labels: np.ndarray | None = None,
                 max_bytes: int | None = None):
        self.vocab_size = check_vocab_size(vocab_size)
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

    def add(self, X: np.ndarray, weights: np.ndarray | None = None) -> NextTokenCounts:
        """Count the pairs of windows X int (n, T), T >= 2, with optional per-window weights (n,)."""
        X = check_sequences(X, self.vocab_size)
        if X.shape[1] < 2:
            raise InputError(f"X needs windows of length T >= 2 to hold a next token, got shape {X.shape}")
        w = None if weights is None else np.repeat(check_weights(weights, X.shape[0]), X.shape[1] - 1)
        first, nxt = X[:, :-1].ravel(), X[:, 1:].ravel()
        flat = self._row[first] * (self.labels.size + 1) + self._col[nxt]
        self._pairs += np.bincount(flat, weights=w, minlength=self._pairs.size)
        self._first += np.bincount(first, weights=w, minlength=self.vocab_size)
        return self

    def signature(self) -> tuple[np.ndarray, np.ndarray]:
        """``(r_nt, phi_nt)``: float64 (V,) over the whole vocabulary, summing to 1, and float64
        (len(tokens), len(labels)) with ``phi_nt[i, j] = P(x_{s+1} = labels[j] | x_s = tokens[i])``;
        rows of tokens never seen at s < T-1 are zero (mask with ``r_nt[tokens] > 0``)."""
        total = self._first.sum()
        if total == 0:
            raise InputError("no next-token pairs counted yet: add() at least one chunk of windows")
        pairs = self._pairs.reshape(self.tokens.size + 1, self.labels.size + 1)[:-1, :-1]
        rows = self._first[self.tokens][:, None]
        phi = np.divide(pairs, rows, out=np.zeros_like(pairs), where=rows > 0)
        return self._first / total, phi


def next_token_signature(X: np.ndarray, vocab_size: int, tokens: np.ndarray | None = None,
                         labels: np.ndarray | None = None, weights: np.ndarray | None = None,
                         max_bytes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Next-token occurrence and signature ``(r_nt, phi_nt)`` of windows X int (n, T) (SPEC §6.4).

    One-array form of :class:`NextTokenCounts` (same arguments and result); for a corpus too large
    for one array, ``add`` it chunk by chunk instead.
    """
    return NextTokenCounts(vocab_size, tokens, labels, max_bytes).add(X, weights).signature()

"""Position-specific label signatures and their attention-weighted counterparts (SPEC §2 "Position-specific
variants", used by the attention-only model of SPEC §6.3).

Positions are 0-based: position ``L-1`` is the last one (SPEC's ``x_L``). ``I`` is uniform over all
``L`` positions, as in SPEC §2, but nothing is removed from the context: a fixed position ``s`` may
coincide with ``I`` (then ``x_s = α``), and two fixed positions may coincide with each other.

* position label signature
  ``φ^{y;x_{s1}[,x_{s2}]}_α(ν, β_1[, β_2]) = P(y = ν, x_{s1} = β_1[, x_{s2} = β_2] | x_I = α)``,
  or, with a given position ``s0``, the same conditioned on ``x_{s0} = α``;
* attention label signature ``ψ_α(ν, β..) = E[a_I · a_t | y = ν, x_I = α, x_{s1} = β_1, ..]`` for
  attention weights ``a`` over the positions (``a_t`` only with ``attention_at = t``).

Their product is what the attention paths of SPEC §6.3 need: ``L r_α φ_α(ν, β) ψ_α(ν, β) =
E[Σ_i 1{x_i = α} a_i a_t 1{y = ν, x_s = β}]`` (per sample, mean over the data).

Estimation: every occurrence of ``α`` (each sample, each position ``i`` holding ``α``; only ``i = s0``
with a given position) counts once, with the sample's weight. The flat index ``(α, ν, β..)`` of every
(sample, occurrence) pair is computed at once — an ``(n, L)`` array, the size of ``X`` itself, so no
chunking is needed — and histogrammed with ``np.bincount``: with the sample weights for ``φ``'s
numerator and for ``ψ``'s denominator, with the weights times ``a_I a_t`` for ``ψ``'s numerator.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxstair.checks import (
    check_dense_size,
    check_id_subset,
    check_labels,
    check_sequences,
    check_vocab_size,
    check_vocab_tables,
    check_weights,
)
from ctxstair.errors import InputError
from ctxstair.signatures.counting import _RESTRICT_HINT, _positions


def position_label_signature(
    X: np.ndarray,
    y: np.ndarray,
    vocab_size: int,
    positions: Sequence[int],
    given_position: int | None = None,
    *,
    tokens: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    context: np.ndarray | None = None,
    weights: np.ndarray | None = None,
    max_bytes: int | None = None,
) -> np.ndarray:
    """Position-specific label signature ``φ^{y;x_{s1}[,x_{s2}]}_α(ν, β_1[, β_2])`` (SPEC §2).

    Args:
        X: int (n, L) token ids; y: int (n,) labels; both in ``0..vocab_size-1``.
        vocab_size: V.
        positions: 1 or 2 fixed positions ``(s1[, s2])`` in ``0..L-1`` (0-based; ``L-1`` is the last).
        given_position: ``s0`` to condition on ``x_{s0} = α`` instead of ``x_I = α`` with ``I`` uniform.
        tokens: optional id subset for ``α`` (default all V ids); a subset selects entries of the
            full signature, nothing is renormalised.
        labels: optional id subset for ``ν`` (default all V ids).
        context: optional id subset for ``β`` (default all V ids).
        weights: optional (n,) non-negative sample weights.
        max_bytes: memory budget for the dense result (default 2 GiB); a larger request raises
            :class:`~ctxstair.errors.TooLargeError` before anything is allocated.

    Returns:
        float64 ``(len(tokens), len(labels), *[len(context)] * len(positions))`` indexed
        ``(α, ν, β_1[, β_2])``. The row of a token that never occurs (at ``s0``) is zero; with full
        subsets every other row sums to 1, and summing over ``β`` gives the order-0 label signature
        (with ``given_position=None``).
    """
    X, y, w, L = _check_data(X, y, vocab_size, weights)
    positions = _check_positions(positions, L, (1, 2))
    anchor = _anchor(given_position, L, "given_position")
    index = _FlatIndex(X, y, vocab_size, positions, anchor, tokens, labels, context, max_bytes,
                       f"label signature at positions {positions}")
    entry_weights = np.repeat(w, anchor.size)  # row-major like the flat index: sample by sample
    occurrences = np.bincount(X[:, anchor].ravel(), weights=entry_weights, minlength=vocab_size)[index.tokens]
    return _ratio(index.histogram(entry_weights), occurrences.reshape((-1,) + (1,) * (len(index.shape) - 1)))


def attention_label_signature(
    X: np.ndarray,
    y: np.ndarray,
    A: np.ndarray,
    vocab_size: int,
    positions: Sequence[int] = (),
    attention_at: int | None = None,
    *,
    tokens: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    context: np.ndarray | None = None,
    weights: np.ndarray | None = None,
    max_bytes: int | None = None,
) -> np.ndarray:
    """Attention label signature ``ψ_α(ν, β..) = E[a_I (a_t) | y = ν, x_I = α, x_positions = β..]`` (SPEC §6.3).

    ``I`` is uniform over all positions. ``positions=()`` gives ``ψ^y_α(ν) = E[a_I | y = ν, x_I = α]``
    (the attention received by an occurrence of ``α`` given the label); ``positions=(L-1,)`` the same
    also conditioned on the last token; ``positions=(L-1, t), attention_at=t`` the
    ``(x_L, x_t)``-conditioned mean of the product ``a_I a_t``.

    Args:
        X: int (n, L) token ids; y: int (n,) labels.
        A: float (n, L) attention weights of the last position over the L positions, per sample.
        vocab_size: V.
        positions: 0, 1 or 2 fixed positions in ``0..L-1`` to condition on.
        attention_at: a position ``t`` whose weight ``a_t`` multiplies ``a_I`` (default: none).
        tokens: as :func:`position_label_signature`.
        labels: as :func:`position_label_signature`.
        context: as :func:`position_label_signature`.
        weights: as :func:`position_label_signature`.
        max_bytes: as :func:`position_label_signature`.

    Returns:
        float64 ``(len(tokens), len(labels), *[len(context)] * len(positions))``: the weighted sum of
        ``a_I (a_t)`` over the occurrences with index ``(α, ν, β..)`` divided by their weighted
        count; 0 where there is no such occurrence.
    """
    X, y, w, L = _check_data(X, y, vocab_size, weights)
    A = np.asarray(A, dtype=np.float64)
    if A.shape != X.shape or not np.all(np.isfinite(A)):
        raise InputError(f"A must be finite attention weights of shape {X.shape} (one per position of X), "
                         f"got shape {A.shape}")
    positions = _check_positions(positions, L, (0, 1, 2))
    every_position = np.arange(L)
    index = _FlatIndex(X, y, vocab_size, positions, every_position, tokens, labels, context, max_bytes,
                       f"attention label signature at positions {positions}")
    received = A * w[:, None]
    if attention_at is not None:
        received *= A[:, _anchor(attention_at, L, "attention_at")]
    return _ratio(index.histogram(received.ravel()), index.histogram(np.repeat(w, L)))


class _FlatIndex:
    """Flat index ``(α, ν, β..)`` of every (sample, occurrence at an anchor position) pair, ids
    outside a subset mapped to an extra "excluded" slot on their axis (sliced off after counting)."""

    def __init__(self, X, y, vocab_size, positions, anchor, tokens, labels, context, max_bytes, what):
        check_vocab_tables(vocab_size)  # before check_id_subset builds arange(V)
        self.tokens = check_id_subset(tokens, vocab_size, "tokens")
        labels = check_id_subset(labels, vocab_size, "labels")
        context = check_id_subset(context, vocab_size, "context")
        self.shape = (self.tokens.size, labels.size) + (context.size,) * len(positions)
        check_dense_size(self.shape, max_bytes, what, _RESTRICT_HINT)
        token_pos, token_axis = _positions(self.tokens, vocab_size)
        label_pos, label_axis = _positions(labels, vocab_size)
        context_pos, context_axis = _positions(context, vocab_size)
        flat = token_pos[X[:, anchor]] * label_axis + label_pos[y][:, None]  # (n, len(anchor))
        for s in positions:
            flat = flat * context_axis + context_pos[X[:, s]][:, None]
        self.flat = flat.ravel()
        self.extended = (token_axis, label_axis) + (context_axis,) * len(positions)

    def histogram(self, entry_weights: np.ndarray) -> np.ndarray:
        """Sum of ``entry_weights`` (one per flat entry) per index, float64 of :attr:`shape`."""
        totals = np.bincount(self.flat, weights=entry_weights, minlength=int(np.prod(self.extended)))
        return totals.reshape(self.extended)[tuple(slice(k) for k in self.shape)]


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """``numerator / denominator`` (broadcast), 0 where the denominator is 0 (no such occurrence)."""
    denominator = np.broadcast_to(denominator, numerator.shape)
    out = np.zeros(numerator.shape)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def _check_data(X, y, vocab_size, weights):
    vocab_size = check_vocab_size(vocab_size)
    X = check_sequences(X, vocab_size)
    y = check_labels(y, X.shape[0], vocab_size)
    return X, y, check_weights(weights, X.shape[0]), X.shape[1]


def _anchor(position: int | None, L: int, name: str) -> np.ndarray:
    """Positions an occurrence of ``α`` may sit at: all ``L`` (``position=None``) or the given one."""
    if position is None:
        return np.arange(L)
    return np.array([_check_position(position, L, name)])


def _check_positions(positions: Sequence[int], L: int, counts: tuple[int, ...]) -> tuple[int, ...]:
    if not isinstance(positions, (tuple, list)) or len(positions) not in counts:
        raise InputError(f"positions must be a tuple of {' or '.join(map(str, counts))} positions, got {positions!r}")
    return tuple(_check_position(s, L, "positions") for s in positions)


def _check_position(position: object, L: int, name: str) -> int:
    if isinstance(position, bool) or not isinstance(position, (int, np.integer)) or not 0 <= position < L:
        raise InputError(f"{name} must hold positions in 0..{L - 1} (0-based, sequence length L={L}), "
                         f"got {position!r}")
    return int(position)

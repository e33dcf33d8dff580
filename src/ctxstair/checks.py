"""Validation of array arguments shared by every module (SPEC §1 data model).

Each checker returns a clean array or raises :class:`~ctxstair.errors.InputError` whose message
names the argument and the allowed range.
"""

from __future__ import annotations

import os

import numpy as np

from ctxstair.errors import InputError, TooLargeError

#: Default budget for one dense result, in bytes (float64 entries x 8); the environment variable
#: ``CTXSTAIR_MAX_GIB`` replaces it (e.g. ``CTXSTAIR_MAX_GIB=16`` on a large machine).
DEFAULT_MAX_BYTES = 2 * 1024**3


def check_vocab_size(vocab_size: object) -> int:
    """Return ``vocab_size`` as a positive int."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise InputError(f"vocab_size must be a positive integer, got {vocab_size!r}")
    return int(vocab_size)


def as_array(value: object, name: str, dtype: object = None) -> np.ndarray:
    """``np.asarray(value, dtype)``; InputError naming ``name`` for ragged nesting or values that do
    not convert (numpy raises ValueError or TypeError there)."""
    try:
        return np.asarray(value, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as error:
        raise InputError(f"{name} must be a rectangular array of numbers: {error}".replace("\n", " ")) from None


def check_sequences(X: object, vocab_size: int, name: str = "X") -> np.ndarray:
    """Check an integer token array of shape (n, L) with n >= 1, L >= 1 and ids in [0, vocab_size)."""
    arr = as_array(X, name)
    if arr.dtype.kind not in "iu":
        raise InputError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise InputError(f"{name} must have shape (n_samples, seq_len), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise InputError(f"{name} is empty (shape {arr.shape}); need at least one sample and one position")
    _check_id_range(arr, vocab_size, name)
    return arr.astype(np.int64, copy=False)


def check_labels(y: object, n_samples: int, vocab_size: int, name: str = "y") -> np.ndarray:
    """Check an integer label array of shape (n_samples,) with ids in [0, vocab_size)."""
    arr = as_array(y, name)
    if arr.dtype.kind not in "iu":
        raise InputError(f"{name} must hold integer label ids, got dtype {arr.dtype}")
    if arr.shape != (n_samples,):
        raise InputError(f"{name} must have shape ({n_samples},) to match X, got shape {arr.shape}")
    _check_id_range(arr, vocab_size, name)
    return arr.astype(np.int64, copy=False)


def check_weights(weights: object, n_samples: int) -> np.ndarray:
    """Check optional per-sample weights: shape (n_samples,), finite, >= 0, positive sum."""
    if weights is None:
        return np.ones(n_samples)
    arr = as_array(weights, "weights", np.float64)
    if arr.shape != (n_samples,):
        raise InputError(f"weights must have shape ({n_samples},) to match X, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or arr.sum() <= 0:
        raise InputError("weights must be finite, non-negative and not all zero")
    return arr


def check_id_subset(ids: object, vocab_size: int, name: str) -> np.ndarray:
    """Return a token subset as int64 (k,), defaulting to all ids; no duplicates allowed."""
    if ids is None:
        return np.arange(vocab_size, dtype=np.int64)
    arr = as_array(ids, name)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.dtype.kind not in "iu" or arr.ndim != 1 or arr.size == 0:
        raise InputError(f"{name} must be a non-empty 1-D list of integer token ids, got {arr.dtype} shape {arr.shape}")
    _check_id_range(arr, vocab_size, name)
    if np.unique(arr).size != arr.size:
        raise InputError(f"{name} contains duplicate token ids")
    return arr.astype(np.int64, copy=False)


def check_order(order: object, seq_len: int, minimum: int = 0) -> int:
    """Check a signature order m with ``minimum <= m <= seq_len - 1``."""
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)):
        raise InputError(f"order must be an integer, got {order!r}")
    if not minimum <= order <= seq_len - 1:
        raise InputError(f"order must be in {minimum}..{seq_len - 1} (sequence length L={seq_len}), got {order}")
    return int(order)


def default_max_bytes() -> int:
    """The memory budget of one dense result: ``CTXSTAIR_MAX_GIB`` GiB if set, else 2 GiB."""
    raw = os.environ.get("CTXSTAIR_MAX_GIB")
    if raw is None:
        return DEFAULT_MAX_BYTES
    try:
        gib = float(raw)
    except ValueError:
        gib = float("nan")
    if not gib > 0:
        raise InputError(f"CTXSTAIR_MAX_GIB must be a positive number of GiB, got {raw!r}")
    return int(gib * 2**30)


def check_dense_size(shape: tuple[int, ...], max_bytes: int | None, what: str, how: str, itemsize: int = 8) -> None:
    """Refuse a dense result of ``shape`` (``itemsize`` bytes per entry, float64 by default) larger
    than ``max_bytes`` (default :func:`default_max_bytes`) before anything is allocated."""
    budget = default_max_bytes() if max_bytes is None else max_bytes
    n_bytes = itemsize * int(np.prod(shape, dtype=object))
    if n_bytes > budget:
        raise TooLargeError(
            f"{what} of shape {shape} needs {n_bytes / 2**30:.2f} GiB, above the budget of "
            f"{budget / 2**30:.2f} GiB; {how}, or raise the budget (max_bytes, or CTXSTAIR_MAX_GIB)"
        )


def check_vocab_tables(vocab_size: int) -> None:
    """Refuse a vocabulary whose per-token tables (``vocab_size`` entries of 8 bytes, e.g. the
    id -> index maps of the estimators) exceed :func:`default_max_bytes`, before they are
    allocated. The ``max_bytes`` of an estimator bounds its dense result, not these tables."""
    check_dense_size((vocab_size,), None, f"a per-token table (vocab_size={vocab_size})",
                     "renumber the token ids to a smaller vocab_size")


def _check_id_range(arr: np.ndarray, vocab_size: int, name: str) -> None:
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        bad = arr.min() if arr.min() < 0 else arr.max()
        raise InputError(f"{name} contains token id {bad}; ids must be in 0..{vocab_size - 1} (vocab_size={vocab_size})")

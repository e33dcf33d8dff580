"""Input validation, in one place: arrays (SPEC §1 data model), the arrays of the alignment measures,
task parameters and configuration keys.

Each checker returns the clean value or raises :class:`~ctxstair.errors.InputError` whose message
names the argument (or key) and the allowed range, which the command line prints on one line with
exit code 2.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

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
        raise InputError(f"{name} contains token id {bad}; ids must be in 0..{vocab_size - 1} "
                         f"(vocab_size={vocab_size})")


# ---------------------------------------------------------------- arrays of the alignment measures

def float_array(x: object, name: str, min_ndim: int = 1) -> np.ndarray:
    """Return ``x`` as a finite float64 array with at least ``min_ndim`` axes, none of them empty."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a numeric array, got {type(x).__name__}: {exc}") from None
    if arr.ndim < min_ndim or arr.size == 0:
        raise InputError(f"{name} must be a non-empty array with at least {min_ndim} axes, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} contains NaN or infinite values")
    return arr


def square_stack(S: object, name: str) -> np.ndarray:
    """Check a square matrix (n, n), or a stack of them (..., n, n), with n >= 2."""
    arr = float_array(S, name, min_ndim=2)
    n = arr.shape[-1]
    if arr.shape[-2] != n or n < 2:
        raise InputError(
            f"{name} must be a square matrix (n, n) or a stack (..., n, n) with n >= 2, got shape {arr.shape}"
        )
    return arr


def phi1_array(phi1: object) -> np.ndarray:
    """Check an order-1 label signature restricted to P context tokens: (T, V_labels, P), T >= 2."""
    arr = float_array(phi1, "phi1")
    if arr.ndim != 3 or arr.shape[0] < 2:
        raise InputError(f"phi1 must have shape (T >= 2 tokens, V_labels, P context tokens), got shape {arr.shape}")
    return arr


def snapshots(embeddings: object, n_tokens: int) -> np.ndarray:
    """Check embeddings (T, d) or snapshots (S, T, d) of the same T tokens; return (S, T, d)."""
    arr = float_array(embeddings, "embeddings", min_ndim=2)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise InputError(f"embeddings must have shape (T, d) or (S snapshots, T, d), got shape {arr.shape}")
    if arr.shape[1] != n_tokens:
        raise InputError(
            f"embeddings has {arr.shape[1]} token rows (shape {arr.shape}) but phi1 has T={n_tokens} tokens"
        )
    return arr


def int_in_range(name: str, value: object, low: int, high: float = np.inf) -> int:
    """Return ``value`` as an int with ``low <= value <= high`` (InputError naming ``name``); the
    arguments are in :func:`check_int`'s order, whose message names a task parameter."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        allowed = f">= {low}" if high == np.inf else f"in {low}..{int(high)}"
        raise InputError(f"{name} must be an integer {allowed}, got {value!r}")
    return int(value)


def positive_float(value: object, name: str) -> float:
    """Return ``value`` as a finite float > 0."""
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        out = np.nan
    if not np.isfinite(out) or out <= 0:
        raise InputError(f"{name} must be a finite number > 0, got {value!r}")
    return out


# ---------------------------------------------------------------- task parameters

#: Largest integer a task parameter may take: ids, sizes and shifts stay far from int64 overflow
#: (a label may add up to three of them).
MAX_INT = 2**60


def check_rows(what: str, n_rows: int, seq_len: int) -> None:
    """Refuse (:class:`~ctxstair.errors.TooLargeError`) ``n_rows`` int64 sequences of ``seq_len``
    above the memory budget (:func:`~ctxstair.checks.default_max_bytes`), before allocating them."""
    check_dense_size((n_rows, seq_len), None, what, "lower the parameters that set its size")


def check_int(name: str, value: object, lo: int | None = None, hi: int | None = None) -> int:
    """Return ``value`` as int if it is an integer in ``lo..hi`` (either bound optional); every
    integer parameter is also at most :data:`MAX_INT` in absolute value."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if ok and abs(int(value)) > MAX_INT:
        raise InputError(f"parameter {name!r} must be an integer of absolute value at most 2**60, got {value!r}")
    if ok and lo is not None and value < lo:
        ok = False
    if ok and hi is not None and value > hi:
        ok = False
    if not ok:
        if lo is not None and hi is not None:
            allowed = f"an integer in {lo}..{hi}"
        elif lo is not None:
            allowed = f"an integer >= {lo}"
        elif hi is not None:
            allowed = f"an integer <= {hi}"
        else:
            allowed = "an integer"
        raise InputError(f"parameter {name!r} must be {allowed}, got {value!r}")
    return int(value)


def check_float(name: str, value: object, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False) -> float:
    """Return ``value`` as a finite float in ``[lo, hi]`` (``(lo, hi]`` when ``lo_open``)."""
    ok = isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)
    ok = ok and bool(np.isfinite(value))
    if ok and lo is not None and (value <= lo if lo_open else value < lo):
        ok = False
    if ok and hi is not None and value > hi:
        ok = False
    if not ok:
        lower = "" if lo is None else (f" > {lo}" if lo_open else f" >= {lo}")
        upper = "" if hi is None else f" <= {hi}"
        joiner = " and" if lower and upper else ""
        raise InputError(f"parameter {name!r} must be a finite number{lower}{joiner}{upper}, got {value!r}")
    return float(value)


def check_choice(name: str, value: object, allowed: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``allowed``."""
    if value not in allowed:
        raise InputError(f"parameter {name!r} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
    return str(value)


def check_disjoint(groups: dict[str, np.ndarray]) -> None:
    """Refuse token-id groups that share an id (the tasks' roles must be distinct tokens)."""
    names = list(groups)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            common = np.intersect1d(groups[a], groups[b])
            if common.size:
                raise InputError(
                    f"token ids of {a} and {b} overlap (e.g. id {int(common[0])}); choose disjoint ranges"
                )


# ---------------------------------------------------------------- configuration keys

def check_minimum(items: list[tuple[str, float, float]]) -> None:
    """InputError naming the first ``(key, value, low)`` whose value is below ``low``."""
    for key, value, low in items:
        if value < low:
            raise InputError(f"{key} must be >= {low}, got {value}")


def check_positive(items: list[tuple[str, float]]) -> None:
    """InputError naming the first ``(key, value)`` whose value is not > 0 (NaN included)."""
    for key, value in items:
        if not value > 0:
            raise InputError(f"{key} must be > 0, got {value}")


def check_key_choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
    """InputError naming the config ``key`` unless ``value`` is one of ``allowed``."""
    if value not in allowed:
        raise InputError(f"{key} must be one of {', '.join(allowed)}; got {value!r}")

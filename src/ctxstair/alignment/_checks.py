"""Argument checks shared by the alignment modules; each raises :class:`InputError` naming the argument."""

from __future__ import annotations

import numpy as np

from ctxstair.errors import InputError


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


def int_in_range(value: object, name: str, low: int, high: float = np.inf) -> int:
    """Return ``value`` as an int with ``low <= value <= high``."""
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

"""Building blocks shared by the task generators: sequence grids and parameter-value checks.

Each check raises :class:`~ctxstair.errors.InputError` naming the parameter and the allowed range.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ctxstair.errors import InputError



def product_grid(*values: Sequence[int] | np.ndarray) -> np.ndarray:
    """All sequences whose position ``i`` takes a value of ``values[i]``, as int64 rows.

    Rows are in lexicographic order of the given value orders: the first position varies slowest,
    the last fastest (``itertools.product`` order), built with numpy, no Python loop over rows.
    """
    axes = [np.asarray(v, dtype=np.int64) for v in values]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


def numbers(lo: int, hi: int) -> np.ndarray:
    """The token ids ``lo..hi`` (inclusive) as int64."""
    return np.arange(lo, hi + 1, dtype=np.int64)


def all_pairs(N: int) -> np.ndarray:
    """All ``N**2`` pairs ``(x1, x2)`` of numbers ``1..N``, lexicographic (shape ``(N*N, 2)``)."""
    return product_grid(numbers(1, N), numbers(1, N))


def check_int(name: str, value: object, lo: int | None = None, hi: int | None = None) -> int:
    """Return ``value`` as int if it is an integer in ``lo..hi`` (either bound optional)."""
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
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


def check_id_range(lo_name: str, lo: object, hi_name: str, hi: object) -> np.ndarray:
    """Check a token-id range ``lo..hi`` (``0 <= lo <= hi``) and return its ids."""
    lo = check_int(lo_name, lo, 0)
    hi = check_int(hi_name, hi, lo)
    return numbers(lo, hi)


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

"""Building blocks shared by the task generators: sequence grids and parameter-value checks.

Each check raises :class:`~ctxstair.errors.InputError` naming the parameter and the allowed range.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ctxstair.checks import check_dense_size
from ctxstair.errors import InputError

#: Largest integer a task parameter may take: ids, sizes and shifts stay far from int64 overflow
#: (a label may add up to three of them).
MAX_INT = 2**60


def product_grid(*values: Sequence[int] | np.ndarray) -> np.ndarray:
    """All sequences whose position ``i`` takes a value of ``values[i]``, as int64 rows.

    Rows are in lexicographic order of the given value orders: the first position varies slowest,
    the last fastest (``itertools.product`` order), built with numpy, no Python loop over rows.
    """
    axes = [np.asarray(v, dtype=np.int64) for v in values]
    check_rows("sequence grid", int(np.prod([a.size for a in axes], dtype=object)), len(axes))
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


def numbers(lo: int, hi: int) -> np.ndarray:
    """The token ids ``lo..hi`` (inclusive) as int64; a range above the memory budget is refused."""
    check_dense_size((max(hi - lo + 1, 0),), None, f"token id range {lo}..{hi}", "choose a smaller id range")
    return np.arange(lo, hi + 1, dtype=np.int64)


def all_pairs(N: int) -> np.ndarray:
    """All ``N**2`` pairs ``(x1, x2)`` of numbers ``1..N``, lexicographic (shape ``(N*N, 2)``)."""
    return product_grid(numbers(1, N), numbers(1, N))


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


def check_id_range(lo_name: str, lo: object, hi_name: str, hi: object) -> np.ndarray:
    """Check a token-id range ``lo..hi`` (``0 <= lo <= hi``) and return its ids."""
    lo = check_int(lo_name, lo, 0)
    hi = check_int(hi_name, hi, 0)
    if hi < lo:
        raise InputError(f"parameters {lo_name!r} and {hi_name!r} must satisfy {lo_name} <= {hi_name}, "
                         f"got {lo_name}={lo}, {hi_name}={hi}")
    check_dense_size((hi - lo + 1,), None, f"token ids {lo_name}..{hi_name} = {lo}..{hi}",
                     f"lower {hi_name} - {lo_name}")
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

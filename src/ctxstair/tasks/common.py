"""Building blocks shared by the task generators: sequence grids and parameter-value checks.

Each check raises :class:`~ctxstair.errors.InputError` naming the parameter and the allowed range.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ctxstair.checks import check_dense_size, check_int, check_rows
from ctxstair.errors import InputError


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

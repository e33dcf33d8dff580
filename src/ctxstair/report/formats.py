"""How a number is written in a report's key numbers and paragraph: :func:`fmt` and
:func:`fmt_epochs` (the numbers themselves are :mod:`ctxstair.analysis.measures`')."""

from __future__ import annotations

import numpy as np


def fmt(x: float | None, digits: int = 3) -> str:
    """A number for a report ('n/a' for None or NaN)."""
    return "n/a" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"


def fmt_epochs(values: list[int | None]) -> str:
    """Epochs for a report, one per member, 'never' for None."""
    return ", ".join("never" if v is None else str(v) for v in values)

"""When to take snapshots: log-spaced early, then every k epochs."""

from __future__ import annotations

import numpy as np


def snapshot_schedule(epochs: int, log_points: int, every: int) -> list[int]:
    """Sorted snapshot epochs in ``0..epochs``.

    Epoch 0 (the initialization), ``log_points`` log-spaced epochs in ``1..every`` (rounded,
    duplicates dropped), every multiple of ``every``, and the last epoch.
    """
    early = np.unique(np.round(np.logspace(0, np.log10(every), log_points)).astype(int)) if log_points else []
    regular = range(every, epochs + 1, every)
    return sorted({0, epochs, *(int(e) for e in early if e <= epochs), *regular})

"""The first-order prefix probe (SPEC §7): its MSE on pairs of held-out tokens next to the same probe
on signatures shuffled across tokens; every state fitted on its own, in one vectorised optimisation."""

from __future__ import annotations

from ctxstair.measure import primitives
from ctxstair.measure.estimators import Estimator
from ctxstair.measure.schema import PROBE, SHUFFLED


def _measure(setup, rows, V: int) -> list[dict]:
    """(S, T, d) embedding rows -> ``probe_heldout_mse``, ``probe_shuffled_mse`` per state, with the
    setup's prefix signatures, split and settings (``probe_steps``, ``seed``, ``probe_method``)."""
    phi = setup.prefix[1]
    args = dict(steps=setup.settings.probe_steps, seed=setup.settings.seed, method=setup.settings.probe_method)
    fitted = primitives.prefix_probe(phi, rows, setup.train_idx, setup.heldout_idx, **args)["heldout_mse"]
    control = primitives.shuffled_baseline(phi, rows, setup.train_idx, setup.heldout_idx, **args)["heldout_mse"]
    return [{PROBE: float(mse), SHUFFLED: float(shuffled)} for mse, shuffled in zip(fitted, control)]


ESTIMATOR = Estimator("probe", (PROBE, SHUFFLED), reads="rows", order=20, switch="probe", on_rows=_measure)

"""ρ_next (SPEC §7): the Pearson and Spearman correlation of the tokens' embedding cosines with their
next-token signatures' cosines ``S^next``, over the pairs a < b; every state at once."""

from __future__ import annotations

from ctxstair.alignment import Reference
from ctxstair.measure import primitives
from ctxstair.measure.estimators import Estimator
from ctxstair.measure.schema import RHO_NEXT, RHO_NEXT_SPEARMAN


def _measure(setup, rows, V: int) -> list[dict]:
    """(S, T, d) embedding rows -> ``rho_next``, ``rho_next_spearman`` per state, against
    :meth:`~ctxstair.measure.staircase.StaircaseSetup.next_cosines` over V next tokens."""
    S_next = setup.next_cosines(V)  # also checks V against the setup's
    # Ranked once per setup, not at every measurement: the triangle of S_next never changes.
    rho = primitives.rho_next_against(rows, setup.derived("next_reference", lambda: Reference(S_next)))
    return [{RHO_NEXT: float(rho["pearson"][i]), RHO_NEXT_SPEARMAN: float(rho["spearman"][i])}
            for i in range(len(rows))]


ESTIMATOR = Estimator("rho_next", (RHO_NEXT, RHO_NEXT_SPEARMAN), reads="rows", order=10, on_rows=_measure)

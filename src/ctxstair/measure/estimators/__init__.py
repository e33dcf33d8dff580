"""The measures of the LM staircase (SPEC §6.4, §7), one estimator each, iterated by every driver.

An estimator (one module here, defining ``ESTIMATOR``) says what it reads, which switch of
:class:`~ctxstair.measure.staircase.StaircaseSettings` turns it on and where it stands in a row, and
measures; the names it writes are those of :mod:`ctxstair.measure.schema`, its settings the setup's.
The three drivers — the LM runs' analysis (:mod:`ctxstair.analysis.lm_staircase`), ``analyze-model``
(:mod:`ctxstair.measure.analyze_model`) and the monitor (:mod:`ctxstair.monitor.staircase`) — never call a
measure: they read model states into :class:`States` and call
:meth:`~ctxstair.measure.staircase.StaircaseSetup.measure`, which runs :func:`measure` over every
estimator found here. So a new measure is a new module here and its test.

What an estimator reads (``reads``):

* ``rows`` — the embedding rows of the token set T of every state at once, (S, T, d) float64, so a
  measure can be vectorised over the snapshots of a run (ρ_next, the probe);
* ``model`` — one state's network at a time, through its view (:mod:`ctxstair.models.view`): the
  attention paths, the path shares, the unembedding alignment. These need the whole network, so
  they are the ``paths`` switch's: a driver reads a network only when they are on.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ctxstair.progress import Progress

if TYPE_CHECKING:
    import torch

    from ctxstair.measure.staircase import StaircaseSetup

__all__ = ["Estimator", "States", "estimators", "measure"]


@dataclass
class States:
    """Model states read by a driver, to be measured (shapes for S states, T tokens, width d).

    Attributes:
        V: the embedding rows of the model(s).
        rows: float64 (S, T, d) embedding rows of the setup's tokens.
        model: state index -> its network (a model with a view, in its dtype and on its device), or
            None when none was read; called once per state, after the ``rows`` estimators.
        counts: state index -> the attention-path counts of the setup's sample when counted already
            (the monitor's ranks count a sharded model's sample together), else None.
    """

    V: int
    rows: np.ndarray
    model: Callable[[int], torch.nn.Module | None] = lambda i: None
    counts: Callable[[int], np.ndarray | None] = lambda i: None


@dataclass(frozen=True)
class Estimator:
    """One measure (module docstring).

    Attributes:
        name: what it is, for messages and the monitor's timings.
        measures: the names of :mod:`ctxstair.measure.schema` it writes (each with ``/<part>`` or not).
        reads: ``rows`` or ``model``.
        switch: the :class:`~ctxstair.measure.staircase.StaircaseSettings` flag that turns it on (``probe``,
            ``paths``), or None: always on.
        order: its place in a row (smaller first).
        on_rows: for ``rows``: (setup, rows (S, T, d), V) -> one dict per state.
        on_model: for ``model``: (setup, network, V, counts or None) -> one dict.
        available: (setup) -> None, or why this setup cannot give the measure (it is then left out).
    """

    name: str
    measures: tuple[str, ...]
    reads: str
    order: int
    switch: str | None = None
    on_rows: Callable[..., list[dict]] | None = None
    on_model: Callable[..., dict] | None = None
    available: Callable[[StaircaseSetup], str | None] = field(default=lambda setup: None)


@functools.cache
def estimators() -> tuple[Estimator, ...]:
    """Every estimator of this package, in row order."""
    import importlib
    import pkgutil

    found = [importlib.import_module(f"{__name__}.{info.name}").ESTIMATOR for info in pkgutil.iter_modules(__path__)]
    return tuple(sorted(found, key=lambda estimator: estimator.order))


def measure(setup: StaircaseSetup, states: States, switches: dict[str, bool],
            seconds: dict[str, float] | None = None, report: str | None = None) -> list[dict]:
    """One row per state: every estimator that is on (``switches``: ``probe``, ``paths``) and available
    for ``setup``, ``rows`` estimators first over all states, then the ``model`` estimators state by
    state. ``seconds``, when given, gets each switch's wall time added (``embeddings`` for the
    estimators always on). ``report``: the name under which the work (each ``rows`` estimator, then
    each state's network) is reported on stderr inside :func:`ctxstair.progress.shown`; None: not reported."""
    active = [e for e in estimators() if (e.switch is None or switches.get(e.switch)) and e.available(setup) is None]
    rows: list[dict] = [{} for _ in range(len(states.rows))]
    on_rows = [e for e in active if e.reads == "rows"]
    on_model = [e for e in active if e.reads == "model"]
    with Progress(len(on_rows) + (len(rows) if on_model else 0), report or "", "measure",
                  show=None if report else False) as bar:
        _measure(setup, states, rows, on_rows, on_model, seconds, bar)
    return rows


def _measure(setup: StaircaseSetup, states: States, rows: list[dict], on_rows: list[Estimator],
             on_model: list[Estimator], seconds: dict[str, float] | None, bar: Progress) -> None:
    """The loops of :func:`measure`, filling ``rows``."""

    def timed(estimator: Estimator, compute: Callable[[], object]) -> object:
        start = time.perf_counter()
        result = compute()
        if seconds is not None:
            part = estimator.switch or "embeddings"
            seconds[part] = seconds.get(part, 0.0) + time.perf_counter() - start
        return result

    for estimator in on_rows:
        for row, values in zip(rows, timed(estimator, lambda e=estimator: e.on_rows(setup, states.rows, states.V))):
            row.update(values)
        bar.update(1)
    for i, row in enumerate(rows if on_model else ()):
        network = states.model(i)
        for estimator in on_model if network is not None else ():
            row.update(timed(estimator, lambda e=estimator, m=network, i=i: e.on_model(setup, m, states.V,
                                                                                      states.counts(i))))
        bar.update(1)


"""Per-run analyses: each reads a trained run (:class:`ctxstair.run.Run`) and writes one file into it.

An analysis is a module ``ctxstair.analysis.<name>`` with ``OUTPUT`` (the file it writes) and
``analyse(run)``; a recipe names the analyses its runs need. A new analysis is that one module, its
row in the table below and the recipe that names it.

====================  ======================  ==================================================
name                  writes                  what
====================  ======================  ==================================================
``alignment``         ``alignment.csv``       signature alignment: order 0, order-1 probes, Fourier (SPEC §3)
``order_shares``      ``theory.csv``          order-m terms of the embedding gradient (SPEC §6.1)
``attention_groups``  ``attention.csv``       attention, norms and gradient paths per token group (SPEC §6.3)
``order2``            ``order2.csv``          the order-2 probe and the flat order-1 geometry (SPEC §8 row C)
``lm_staircase``      ``lm_analysis.csv``     ρ_next, the prefix probe, attention paths, path shares (SPEC §7)
====================  ======================  ==================================================

Beside the analyses, ``measures`` writes nothing: it holds the named measures (the order-0 peak, the
learning onset, chance, ...) that recipes, their figures and sweeps read off a run directory.

    from ctxstair.analysis import analyse
    analyse("runs/staircase-add", ["alignment", "order_shares"])
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from ctxstair.errors import InputError
from ctxstair.run import Run


def analysis_module(name: str) -> ModuleType:
    """The module of analysis ``name``; InputError for a name that is not an analysis."""
    try:
        module = importlib.import_module(f"ctxstair.analysis.{name}")
    except ModuleNotFoundError as error:
        if error.name != f"ctxstair.analysis.{name}":  # the analysis exists but needs a missing module
            raise
        module = None
    if module is None or not hasattr(module, "analyse") or not hasattr(module, "OUTPUT"):
        raise InputError(f"unknown analysis {name!r}")
    return module


def analyse(run: Run | str | Path, names: Iterable[str], resume: bool = False) -> None:
    """Run the analyses ``names`` in order on ``run``; with ``resume``, skip those whose file exists."""
    run = run if isinstance(run, Run) else Run(run)
    for name in names:
        module = analysis_module(name)
        if not (resume and (run.path / module.OUTPUT).is_file()):
            module.analyse(run)

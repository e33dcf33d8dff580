"""``ctxstair explore``: one self-contained, interactive HTML page per run, language-model run or sweep.

The explorer reads only the files of the run-directory contract (``docs/run-directory.md``) —
snapshots, ``signatures.npz``, ``alignment.csv``, ``metrics.jsonl``, ``lm_analysis.csv``,
``sweep.csv``, a series' ``analysis.json`` and ``checkpoints/``, a Trainer output's
``trainer_state.json`` and ``checkpoint-<step>`` folders — so it works on any finished run, also
one made before it existed::

    from ctxstair.report.explorer import write_explorer
    write_explorer("runs/staircase-add")          # runs/staircase-add/explorer.html

* a **run** (:mod:`~ctxstair.report.explorer.run_data`): a snapshot slider with play/pause;
  ``S^emb(t)`` next to ``S^sig,(0)`` and ``S^sig,(1)`` through a chosen Fourier probe; the
  alignment curves and the loss with a cursor at ``t``; the PCA of the embeddings at ``t``;
* a **language-model run**, an ``analyze-model`` **series** or a monitored **Trainer output**
  (:mod:`~ctxstair.report.explorer.lm_data`): ρ_next, the prefix probe, the attention-path
  correlations and the path shares over the states with the cursor; the word groups' PCA and cosines
  where the output has the embeddings;
* a **sweep** (:mod:`~ctxstair.report.explorer.sweep_data`): the phase diagrams, each cell linking
  to its runs' explorers, which are written with it.

Page mechanics: :mod:`~ctxstair.report.explorer.page`.
"""

from __future__ import annotations

from pathlib import Path

from ctxstair import rundir
from ctxstair.errors import InputError
from ctxstair.report.explorer.page import write_page

__all__ = ["EXPLORER", "explorer_targets", "write_explorer"]

#: The explorer's file name inside a run or sweep directory.
EXPLORER = "explorer.html"
#: The directory kinds that get a language-model page (:mod:`~ctxstair.report.explorer.lm_data`).
LM_OUTPUTS = (rundir.LM_RUN, rundir.SERIES, rundir.TRAINER)


def explorer_targets(path: str | Path) -> list[Path]:
    """The directories under ``path`` that an explorer can show: ``path`` itself when it has
    snapshots or is an ``analyze-model`` series or a Trainer output, else those of its parts
    (``recipe.json``'s ``parts``) that have snapshots."""
    path = Path(path)
    if rundir.snapshot_times(path) or rundir.directory_kind(path) in LM_OUTPUTS[1:]:
        return [path]
    parts = rundir.read_json(path, "recipe.json").get("parts", []) if rundir.directory_kind(path) == rundir.RECIPE \
        else []
    return [path / part for part in parts if part and rundir.snapshot_times(path / part)]


def write_explorer(path: str | Path, out: str | Path | None = None, member: int = 0) -> list[Path]:
    """Write the explorer page(s) of ``path`` (module docstring) and return their paths.

    Args:
        path: a run directory (ensemble or language model), a recipe output with parts (one page
            per part), or a sweep directory (its page, then every cell's runs' pages).
        out: the page's file when ``path`` gives one page (default ``<path>/explorer.html``).
        member: the ensemble member a run's page shows.

    Raises:
        InputError: ``path`` holds nothing to explore (no snapshots: a run made with
            ``--no-analysis``, or not a ctxstair directory), or ``out`` with several pages.
    """
    from ctxstair.report.explorer import sweep_data

    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path} is not a directory")
    if rundir.directory_kind(path) == rundir.SWEEP:
        cells = [page for cell in sweep_data.cell_dirs(path) for page in _pages(cell, None, member)]
        page = Path(out or path / EXPLORER)
        return [write_page(page, sweep_data.sweep_payload(path, page.parent)), *cells]
    targets = explorer_targets(path)
    if not targets:
        raise InputError(f"{path} has no snapshots to explore: explore a run directory (a run made with "
                         "--no-analysis has none), a recipe output, a sweep, an analyze-model --out folder or a "
                         "Trainer output measured by ctxstair.monitor")
    if out is not None and len(targets) > 1:
        raise InputError(f"{path} holds {len(targets)} runs ({', '.join(t.name for t in targets)}): "
                         "--out names one page; explore each part's directory instead")
    return [page for target in targets for page in _pages(target, out, member)]


def _pages(run_dir: Path, out: str | Path | None, member: int) -> list[Path]:
    from ctxstair.report.explorer import lm_data, run_data

    pages = []
    for target in explorer_targets(run_dir):
        page = Path(out or target / EXPLORER)
        payload = (lm_data.lm_payload(target, page.parent) if rundir.directory_kind(target) in LM_OUTPUTS
                   else run_data.run_payload(target, member, page.parent))
        pages.append(write_page(page, payload))
    return pages

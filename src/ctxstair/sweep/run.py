"""Run a sweep over a grid of overrides and merge it into ``sweep.csv``, figures and a report
(docs/sweeps.md).

    ctxstair sweep staircase-add --grid model.init.gamma=0.5,1,1.5 --grid model.d=64,128 --seeds 4 --out runs/sweep

Layout of the sweep directory::

    sweep.json            recipe, grid, fixed overrides, seeds, analysis, cells (name, values)
    cells/<name>/         one recipe output directory per cell (as `ctxstair run` writes it)
    sweep.csv             one row per (cell, part, member): grid values, member, numbers
    figures/phase_*.png   phase diagrams: numbers against the grid
    report.html

A cell appears under ``cells/`` only when complete (it is trained under ``cells/.<name>.partial``
and renamed), so ``--resume`` runs exactly the cells that are missing, continuing a partial one
where the local backend left it. ``write_sweep_report`` rebuilds the csv, figures and report from
the files alone (``ctxstair report DIR``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ctxstair import rundir
from ctxstair.analysis import measures as ms
from ctxstair.devices import resolve_device
from ctxstair.errors import InputError
from ctxstair.io import Output, claim_output
from ctxstair.progress import Progress
from ctxstair.recipes import base as recipes
from ctxstair.report.figures import DEFAULT_FIGURE_FORMAT, check_figure_format, save_figure
from ctxstair.report.html import write_report
from ctxstair.sweep.backends import import_ray, run_local, run_ray, unpack_cell
from ctxstair.sweep.cells import CellJob, default_threads, language_model_cell, member_rows
from ctxstair.sweep.grid import Cell, grid_cells

BACKENDS = ("local", "ray")


def run_sweep(recipe: str, out: str | Path, grid: dict[str, list[Any]], overrides: dict[str, Any] | None = None, *,
              seeds: int | None = None, backend: str = "local", workers: int | None = None,
              ray_address: str | None = None, analysis: bool = True, resume: bool = False,
              force: bool = False, figure_format: str = DEFAULT_FIGURE_FORMAT) -> Path:
    """Train every cell of ``grid`` (:func:`~ctxstair.sweep.grid.parse_grid`) for ``recipe`` with the
    fixed ``overrides``, ``seeds`` batched members per cell, on ``backend``; merge and report.

    ``workers``: cells trained at once (default: one per CPU core, at most one per cell); each
    worker gets ``cores // workers`` torch threads. Every cell's configuration is checked before
    anything is written. ``figure_format``: the vector copy beside every figure's PNG, the cells' and
    the sweep's (:data:`~ctxstair.report.figures.FIGURE_FORMATS`). InputError for a bad recipe, key,
    value or figure format, an existing ``out`` without ``resume``/``force``, a ``resume`` with a
    different sweep, or ``backend="ray"`` without Ray."""
    overrides = dict(overrides or {})
    check_figure_format(figure_format)
    recipe_obj = recipes.get(recipe)
    if not recipe_obj.sweepable:
        sweepable = ", ".join(r.name for r in recipes.all_recipes() if r.sweepable)
        raise InputError(f"recipe {recipe!r} trains no runs of its own (it computes), so it cannot be swept; "
                         f"sweep one of: {sweepable}")
    if backend not in BACKENDS:
        raise InputError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be >= 1, got {workers}")
    both = sorted(set(grid) & set(overrides))
    if both:
        raise InputError(f"{', '.join(both)} given both as --grid and as --set")
    cells = grid_cells(grid)
    if len({c.name for c in cells}) != len(cells):
        raise InputError("two grid cells get the same directory name; use values that differ in letters or digits")
    for cell in cells:
        for cfg in recipe_obj.cell_configs({**overrides, **cell.overrides}, seeds, analysis):
            resolve_device(cfg.train.device)
    if backend == "ray":
        import_ray()

    out = Path(out)
    spec = {"recipe": recipe, "grid": grid, "overrides": overrides, "seeds": seeds, "analysis": analysis,
            "cells": [{"name": c.name, "overrides": c.overrides} for c in cells]}
    output = _claim(out, spec, resume, force)
    final_out, out = out, output.path  # a replacement (--force) is built next to the sweep it replaces
    todo = [c for c in cells if not (out / "cells" / c.name).is_dir()]
    workers = min(workers or os.cpu_count() or 1, max(1, len(todo)))
    jobs = []
    for c in todo:
        cell_overrides, cell_analysis = recipe_obj.cell_run({**overrides, **c.overrides}, analysis)
        jobs.append(CellJob(recipe, cell_overrides, seeds, cell_analysis, str(_partial(out, c)),
                            default_threads(workers), figure_format))

    def finished(i: int, archive: bytes | None = None) -> None:
        partial, final = _partial(out, todo[i]), out / "cells" / todo[i].name
        if archive is not None:
            shutil.rmtree(partial, ignore_errors=True)
            unpack_cell(archive, partial)
        os.replace(partial, final)
        bar.set_postfix(done=todo[i].name)
        bar.update(1)

    with Progress(len(cells), f"sweep {final_out.name}", "cell", initial=len(cells) - len(todo)) as bar:
        if backend == "local":
            run_local(jobs, workers, finished)
        else:
            run_ray(jobs, workers, ray_address, finished)
    write_sweep_report(out, figure_format)
    output.commit()
    return final_out


def _partial(out: Path, cell: Cell) -> Path:
    return out / "cells" / f".{cell.name}.partial"


def _claim(out: Path, spec: dict[str, Any], resume: bool, force: bool) -> Output:
    """The sweep's output folder (:func:`ctxstair.io.claim_output`): a new one appears whole with
    ``sweep.json``; a resumed one must hold the same sweep; a replaced one is replaced only once every
    cell is done and the report written."""

    def same(folder: Path) -> None:
        if not (folder / "sweep.json").is_file():
            raise InputError(f"cannot resume {folder}: no sweep.json there")
        if json.loads(json.dumps(spec)) != rundir.read_json(folder, "sweep.json"):
            raise InputError(f"cannot resume {folder}: its sweep.json differs from the requested sweep")

    return claim_output(out, resume=resume, force=force, same=same,
                        start=lambda folder: rundir.write_json(folder, "sweep.json", spec))


def sweep_rows(out: Path) -> list[dict[str, Any]]:
    """Rows of ``sweep.csv``: for every complete cell, its name and grid values, then the rows of
    :func:`~ctxstair.sweep.cells.member_rows`. Cells still missing are left out."""
    spec = rundir.read_json(out, "sweep.json", keys=("cells",))
    rows = []
    for cell in spec["cells"]:
        if (out / "cells" / cell["name"]).is_dir():
            rows += [{"cell": cell["name"], **cell["overrides"], **row}
                     for row in member_rows(out / "cells" / cell["name"])]
    return rows


def write_sweep_report(out: str | Path, figure_format: str = DEFAULT_FIGURE_FORMAT) -> Path:
    """(Re)build ``sweep.csv``, the phase diagrams (PNG and their ``figure_format`` copies) and
    ``report.html`` of a sweep directory; return it."""
    from ctxstair.report import sweep_figures

    out = Path(out)
    spec = rundir.read_json(out, "sweep.json", keys=("cells",))
    rows = sweep_rows(out)
    if not rows:
        raise InputError(f"{out} has no complete cell yet; continue it with --resume")
    rundir.write_table(out, "sweep.csv", list(rows[0]), rows)
    lm = language_model_cell(out / "cells" / rows[0]["cell"])
    figures = sweep_figures.phase_figures(rows, spec["grid"], analysed=spec["analysis"], lm=lm)
    if lm and spec["analysis"]:
        courses = {", ".join(f"{k}={v}" for k, v in cell["overrides"].items()):
                   ms.rho_next_course(out / "cells" / cell["name"])
                   for cell in spec["cells"] if (out / "cells" / cell["name"]).is_dir()}
        figures["rho_next_curves.png"] = (
            "ρ_next and the held-out loss over training, every cell on one figure.",
            sweep_figures.rho_next_curves_figure(courses))
    captions = []
    for name, (caption, fig) in figures.items():
        save_figure(fig, out / "figures" / name, figure_format)
        captions.append((caption, Path("figures") / name))
    done = {row["cell"] for row in rows}
    write_report(out, title=f"sweep of {spec['recipe']} over {' × '.join(spec['grid'])}",
                 summary_paragraph=_paragraph(spec, rows, done, lm), key_numbers=_cell_numbers(spec, rows, lm),
                 figures=captions)
    return out


def _paragraph(spec: dict[str, Any], rows: list[dict[str, Any]], done: set[str], lm: bool) -> str:
    sizes = " × ".join(f"{len(v)} values of {k}" for k, v in spec["grid"].items())
    if lm:
        return (f"{len(done)} of {len(spec['cells'])} cells of {spec['recipe']} ({sizes}), one model each. ρ_next's "
                "peak is its largest value over the snapshots; its decay is how far it falls from the peak by the end, "
                "as a fraction of the peak. Numbers per cell are in sweep.csv, curves in each cell's lm_analysis.csv.")
    text = (f"{len(done)} of {len(spec['cells'])} cells of {spec['recipe']} ({sizes}), "
            f"{len(rows)} trained members in all. Each row of the table gives the medians over a cell's members. ")
    if spec["analysis"]:
        text += ("The order-0 maximum is the largest order-0 Pearson over the snapshots (not the early peak of "
                 "staircase-add's report); the order-1 takeover is the first snapshot at or after it at which the "
                 "zero-mean order-1 probe beats the order-0 signature. ")
    return text + "Per-member numbers are in sweep.csv."


def _cell_numbers(spec: dict[str, Any], rows: list[dict[str, Any]], lm: bool) -> list[dict[str, Any]]:
    """One report row per complete cell: medians of its members' numbers (unjudged)."""
    if lm:
        shown = ([("rho_init", "ρ_next at init", 3), ("rho_peak", "peak", 3), ("rho_peak_step", "at step", 0),
                  ("rho_end", "end", 3), ("decay_fraction", "decay fraction", 2)] if spec["analysis"] else []) + \
                [("val_loss_end", "held-out loss at end", 3), ("train_seconds", "training s", 0)]
    else:
        shown = ([("order0_max", "order-0 maximum", 3), ("order0_max_epoch", "at epoch", 0),
                  ("takeover_epoch", "order-1 takeover epoch", 0),
                  ("order1_probe_zero_mean_end", "zero-mean probe at end", 3)]
                 if spec["analysis"] else []) + [("acc_end", "accuracy at end", 3), ("loss_end", "loss at end", 4)]
    result = []
    for cell in spec["cells"]:
        members = [r for r in rows if r["cell"] == cell["name"]]
        if not members:
            continue
        parts = []
        for column, label, digits in shown:
            values = [r[column] for r in members if r[column] is not None and not np.isnan(r[column])]
            text = f"{np.median(values):.{digits}f}" if values else "none"
            parts.append(f"{label} {text}"
                         + (f" ({len(values)}/{len(members)} members)" if 0 < len(values) < len(members) else ""))
        result.append({"name": ", ".join(f"{k} = {v}" for k, v in cell["overrides"].items()),
                       "measured": "; ".join(parts), "expected": "", "met": None})
    return result

"""One grid cell of a sweep: train it (worker side) and read its numbers back.

A cell is an ordinary recipe run (``ctxstair run RECIPE --set <grid values> --seeds K``): its seeds
are the members of one batched ensemble, so a cell is one batched computation, and its directory is
a recipe output directory that ``ctxstair report`` reads like any other.

The numbers of each member (:func:`member_numbers`, one row of ``sweep.csv``), from its files alone:

* ``order0_max``, ``order0_max_epoch`` — the largest order-0 Pearson over the snapshots and its
  epoch (SPEC §3): the global maximum, and so not the order-0 *peak* of the recipes' reports
  (:func:`ctxstair.analysis.measures.order0_peak`, the largest before the loss has fallen halfway);
  on ``staircase-add`` at its defaults the two coincide;
* ``order0_end``, ``order1_probe_end``, ``order1_probe_zero_mean_end`` — the last snapshot's values;
* ``takeover_epoch`` — the first snapshot epoch at or after the order-0 maximum at which the zero-mean
  order-1 probe (what order 1 adds beyond order 0) explains the embedding geometry better than the
  order-0 signature does (held-out Pearson above the order-0 Pearson); empty if it never does;
* ``loss_end``, ``acc_end``, ``acc100_epoch`` (first epoch at 100 % training accuracy, or empty).

Without analysis (``--no-analysis``) the alignment columns are empty.

A language-model cell (recipe ``lm-staircase``) is one model; its row holds the course of ρ_next
(:data:`LM_NUMBER_COLUMNS`: :func:`ctxstair.analysis.measures.rho_next_course`) and the training's
seconds (``train_seconds``, from ``resources.json``) instead.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ctxstair import numerics, progress, rundir
from ctxstair.analysis import measures as ms
from ctxstair.analysis.lm_staircase import OUTPUT as LM_ANALYSIS
from ctxstair.report.figures import DEFAULT_FIGURE_FORMAT
from ctxstair.run import Run

#: Columns of one member's numbers, in ``sweep.csv`` order.
NUMBER_COLUMNS = ("order0_max", "order0_max_epoch", "order0_end", "order1_probe_end",
                  "order1_probe_zero_mean_end", "takeover_epoch", "loss_end", "acc_end", "acc100_epoch")
#: Columns of a language-model cell's numbers, in ``sweep.csv`` order.
LM_NUMBER_COLUMNS = ms.RHO_NEXT_NUMBERS + ("train_seconds",)


@dataclass(frozen=True)
class CellJob:
    """What a worker needs to train one cell into ``out``: the recipe, every override (``--set`` and
    the cell's grid values), the number of seeds, whether to analyse, its torch thread count and the
    format of its figures' vector copies (:data:`ctxstair.report.figures.FIGURE_FORMATS`)."""

    recipe: str
    overrides: dict[str, Any]
    seeds: int | None
    analysis: bool
    out: str
    threads: int = 1
    figure_format: str = DEFAULT_FIGURE_FORMAT


def run_cell(job: CellJob) -> str:
    """Train (and analyse) one cell into ``job.out``, continuing it if a previous attempt left a
    resumable run there; return ``job.out``. Runs in a worker process (pool or Ray task)."""
    import torch

    from ctxstair.recipes import run_recipe

    out = Path(job.out)
    resumable = (out / "config.yaml").is_file() or (out / "recipe.json").is_file()
    if out.exists() and not resumable:  # interrupted before anything resumable was written
        shutil.rmtree(out)
    threads = torch.get_num_threads()
    torch.set_num_threads(job.threads)
    try:
        with progress.shown(False):  # the sweep reports cells; in the sweep's process too (one worker)
            run_recipe(job.recipe, out, job.overrides, seeds=job.seeds, resume=resumable, analysis=job.analysis,
                       figure_format=job.figure_format)
    finally:
        torch.set_num_threads(threads)  # a sweep run in the caller's process leaves its setting alone
    return job.out


def run_directories(cell_dir: Path) -> dict[str, Path]:
    """Part name -> run directory of a cell ('' for a single-run recipe)."""
    if (cell_dir / "recipe.json").is_file():
        return {part: cell_dir / part for part in rundir.read_json(cell_dir, "recipe.json", keys=("parts",))["parts"]}
    return {"": cell_dir}


def member_rows(cell_dir: Path) -> list[dict[str, Any]]:
    """One row per (part, member) of a trained cell: ``part``, ``member``, the member's ``seed``,
    ``d``, ``gamma_embedding``, ``gamma_unembedding`` (``members.csv``) and its numbers
    (:data:`NUMBER_COLUMNS`)."""
    rows = []
    for part, run in run_directories(cell_dir).items():
        cfg = Run(run).config
        if rundir.directory_kind(run) == rundir.LM_RUN:
            rows.append({"part": part, "member": 0, "seed": cfg.train.seed, **lm_numbers(run)})
            continue
        members = rundir.read_table(run, "members.csv", ints=("member", "seed", "d"))
        analysed = (run / "alignment.csv").is_file()
        table = rundir.read_alignment(run) if analysed else None
        for i, member in enumerate(members["member"]):
            rows.append({"part": part, "member": int(member), "seed": int(members["seed"][i]),
                         "d": int(members["d"][i]), "gamma_embedding": float(members["gamma_embedding"][i]),
                         "gamma_unembedding": float(members["gamma_unembedding"][i]),
                         **member_numbers(run, int(member), table)})
    return rows


def language_model_cell(cell_dir: Path) -> bool:
    """Whether a trained cell's runs are language models (one row per cell of the course of ρ_next)."""
    return any(rundir.directory_kind(run) == rundir.LM_RUN for run in run_directories(cell_dir).values())


def member_numbers(run: Path, member: int, alignment: dict[str, np.ndarray] | None) -> dict[str, Any]:
    """The numbers of one member (module docstring); ``alignment`` is the run's ``read_alignment``
    table, or None when the run was not analysed."""
    epochs, loss = ms.metric_series(run, member, "loss")
    _, acc = ms.metric_series(run, member, "acc")
    numbers: dict[str, Any] = dict.fromkeys(NUMBER_COLUMNS)
    numbers.update(loss_end=float(loss[-1]), acc_end=float(acc[-1]), acc100_epoch=ms.learned_epoch(epochs, acc, 1.0))
    if alignment is None or not np.any(alignment["signature"] == "order0"):
        return numbers
    snap, r0 = rundir.alignment_series(alignment, "order0", member)
    if np.all(np.isnan(r0)):
        return numbers
    top = int(np.nanargmax(r0))
    numbers.update(order0_max=float(r0[top]), order0_max_epoch=int(snap[top]), order0_end=float(r0[-1]))
    if np.any(alignment["signature"] == "order1_probe_zero_mean"):
        _, probe = rundir.alignment_series(alignment, "order1_probe", member)
        _, probe0 = rundir.alignment_series(alignment, "order1_probe_zero_mean", member)
        after = np.arange(len(snap)) >= top
        numbers.update(order1_probe_end=float(probe[-1]), order1_probe_zero_mean_end=float(probe0[-1]),
                       takeover_epoch=ms.first_epoch(snap, after & (probe0 > r0)))
    return numbers


def lm_numbers(run: Path) -> dict[str, Any]:
    """The numbers of a language-model run (module docstring); the ρ_next columns are empty when
    it was not analysed."""
    numbers: dict[str, Any] = dict.fromkeys(LM_NUMBER_COLUMNS)
    if (run / LM_ANALYSIS).is_file():
        course = ms.rho_next_course(run)
        numbers.update({column: course[column] for column in ms.RHO_NEXT_NUMBERS})
    else:
        val = [r["val_loss"] for r in rundir.read_metric_rows(run) if "val_loss" in r]
        numbers["val_loss_end"] = val[-1] if val else None
    numbers["train_seconds"] = rundir.read_json(run, "resources.json", keys=("seconds",))["seconds"]
    return numbers


def default_threads(workers: int) -> int:
    """Torch threads per worker so that ``workers`` workers share this machine's cores; in
    reproducible mode the mode's fixed count, which the numbers depend on (:mod:`ctxstair.numerics`)."""
    record = numerics.settings()
    if record["mode"] == "reproducible":
        return record["threads"]
    return max(1, (os.cpu_count() or 1) // max(1, workers))

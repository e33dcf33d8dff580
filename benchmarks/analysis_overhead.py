"""What a run costs beyond its training, stage by stage: `staircase-add` and `ctxstair lm train` at their defaults.

    python benchmarks/analysis_overhead.py   # about 5 min on 2 cores; prints two Markdown tables and two headlines

Targets: everything ``ctxstair run staircase-add`` does beyond training (what it costs beyond
``ctxstair run --no-analysis``: snapshot files, analysis, report and explorer) at most **40 %** of
the training time; the analysis, report and explorer of ``ctxstair lm train`` at its defaults at
most **25 %** of its training.

The recipe's config is read from the registry (N = 40, d = 128, ReLU, GD lr 2, 3,000 epochs, one
member, the default snapshot schedule) and each stage is timed in a temporary directory, in the
order ``ctxstair run`` runs them (the two trainings as the best of 2 runs, the stages after them once):

* training alone as ``ctxstair run --no-analysis`` does it (``snapshots.save=false``: checkpoints
  at the schedule, no snapshot files) — the reference time;
* snapshot files: training with snapshots minus training alone;
* the alignment analysis (``alignment``: order 0, both order-1 probes, Fourier), and within it the
  two probes' fits (:func:`ctxstair.alignment.probe_alignment`);
* the order shares (``order_shares``, ``theory.csv``);
* the report (:func:`ctxstair.recipes.write_recipe_report`), and within it the figure files
  (:func:`ctxstair.report.figures.save_figure`: PNG and SVG; the figures are drawn before, in the
  recipe's ``draw``);
* the explorer page (:func:`ctxstair.cli.explore.explore_run`).

The language model (``lm-staircase`` at its defaults: the synthetic corpus, 2,000 steps) is timed the
same way: training as ``ctxstair lm train --no-analysis`` does it (snapshots are written either
way), then the analysis ``lm_staircase`` and within it the prefix probe with its shuffled control
(:func:`ctxstair.measure.primitives.prefix_probe`), the report and the explorer. Both use the default
``analysis.probe=fast``. Seconds depend on the machine's load; the fractions much less.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

import ctxstair.analysis.alignment
import ctxstair.measure.primitives
import ctxstair.recipes.base
from ctxstair.analysis import analyse
from ctxstair.cli.explore import explore_run
from ctxstair.recipes import get, write_recipe_report
from ctxstair.run import Run
from ctxstair.train import train_run

TARGET = 0.40
LM_TARGET = 0.25


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@contextlib.contextmanager
def _inner_timer(module, name: str):
    """Count the seconds spent in ``module.name`` while the block runs; yields a one-item list."""
    original, spent = getattr(module, name), [0.0]

    @functools.wraps(original)
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    setattr(module, name, timed)
    try:
        yield spent
    finally:
        setattr(module, name, original)


def _table(title: str, train_name: str, train: float, stages: list[tuple[str, float, bool]]) -> float:
    """Print the Markdown table of ``stages`` (name, seconds, whether it counts in the total; the
    others are parts of the stage above them) and return the total beyond training."""
    total = sum(seconds for _, seconds, counted in stages if counted)
    print(f"\n{title}\n\n| stage | seconds | fraction of training |\n|---|---|---|")
    print(f"| {train_name} | {train:.2f} | 1.00 |")
    for name, seconds, counted in stages:
        print(f"| {name if counted else '… of which ' + name} | {seconds:.2f} | {seconds / train:.3f} |")
    print(f"| **everything beyond training** | **{total:.2f}** | **{total / train:.3f}** |")
    return total


def staircase_add() -> None:
    """The stages of ``ctxstair run staircase-add`` beyond training."""
    cfg = get("staircase-add").runs()[""]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        bare = replace(cfg, snapshots=replace(cfg.snapshots, save=False))
        # Best of 2 fresh runs each: the first training of a process also pays for warming up torch.
        train = min(_timed(lambda i=i: train_run(bare, Path(tmp) / f"bare{i}", progress=False)) for i in range(2))
        with_snapshots = min(_timed(lambda i=i: train_run(cfg, Path(tmp) / f"run{i}", progress=False))
                             for i in range(2))
        run = Path(tmp) / "run1"
        with _inner_timer(ctxstair.analysis.alignment, "probe_alignment") as probes:
            alignment = _timed(lambda: analyse(run, ["alignment"]))
        order_shares = _timed(lambda: analyse(run, ["order_shares"]))
        with _inner_timer(ctxstair.recipes.base, "save_figure") as figure_files:
            report = _timed(lambda: write_recipe_report(run))
        with contextlib.redirect_stdout(None):
            explorer = _timed(lambda: explore_run(run))
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")
    total = _table(f"`ctxstair run staircase-add` ({cfg.train.epochs} epochs, {cfg.train.members} member(s), "
                   f"snapshots log_points={cfg.snapshots.log_points} every={cfg.snapshots.every}):",
                   "training alone (`--no-analysis`)", train, [
                       ("snapshot files (training with snapshots − training alone)", with_snapshots - train, True),
                       ("alignment (`alignment`: order 0, both probes, Fourier)", alignment, True),
                       ("the two order-1 probes' fits", probes[0], False),
                       ("order shares (`order_shares`, theory.csv)", order_shares, True),
                       ("report (summary, figures, report.html)", report, True),
                       ("figure files (PNG + SVG)", figure_files[0], False),
                       ("explorer (explorer.html)", explorer, True)])
    print(f"\nstaircase-add: everything beyond training {100 * total / train:.1f} % of training "
          f"(target at most {100 * TARGET:.0f} %: {'met' if total / train <= TARGET else 'not met'})")


def language_model() -> None:
    """The stages of ``ctxstair lm train`` at its defaults (synthetic corpus) beyond training."""
    recipe = get("lm-staircase")
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "lm"
        train = _timed(lambda: recipe.trainer(out, {"analysis.enabled": False}, False, False))
        cfg = Run(out).config
        run = Run(out, replace(cfg, analysis=replace(cfg.analysis, enabled=True)))
        with _inner_timer(ctxstair.measure.primitives, "prefix_probe") as probes:
            analysis = _timed(lambda: analyse(run, ["lm_staircase"]))
        report = _timed(lambda: write_recipe_report(out))
        with contextlib.redirect_stdout(None):
            explorer = _timed(lambda: explore_run(out))
        snapshots = len(run.snapshot_times())
    total = _table(f"`ctxstair lm train` at its defaults ({cfg.train.steps} steps, synthetic corpus, "
                   f"{snapshots} snapshots; load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after):",
                   "training (`--no-analysis`; snapshots are written)", train, [
                       ("analysis (`lm_staircase`)", analysis, True),
                       ("the prefix probe and its shuffled control", probes[0], False),
                       ("report", report, True),
                       ("explorer (explorer.html)", explorer, True)])
    print(f"\nlm train: everything beyond training {100 * total / train:.1f} % of training "
          f"(target at most {100 * LM_TARGET:.0f} %: {'met' if total / train <= LM_TARGET else 'not met'})")


if __name__ == "__main__":
    staircase_add()
    language_model()

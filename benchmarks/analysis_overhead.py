"""What the analysis costs next to training: `staircase-add` and `ctxstair lm train` at their defaults.

    python benchmarks/analysis_overhead.py   # about 5 min on 2 cores; prints two Markdown tables

The recipe's config is read from the registry (N = 40, d = 128, ReLU, GD lr 2, 3,000 epochs, one
member, the default snapshot schedule) and each step is timed in a temporary directory (the two
trainings as the best of 2 runs, the analysis steps once):

* training alone as ``ctxstair run --no-analysis`` does it (``snapshots.save=false``: checkpoints
  at the schedule, no snapshot files) — the reference time;
* training with snapshots (analysis off) — the difference is the cost of writing the snapshots;
* the alignment analysis with the probe (the analysis ``alignment``, :mod:`ctxstair.analysis.alignment`), and
  for comparison the same with ``analysis.probe_steps=0`` (the probe scored, not fitted);
* the recipe's order-shares analysis (``order_shares``, ``theory.csv``);
* the report (:func:`ctxstair.recipes.write_recipe_report`: summary, figures, report.html).

The headline overhead is snapshots + alignment (both probes, Fourier) + order shares, as a fraction
of the reference training time (target at most 15 %); the report is printed next to it. The
language model (``lm-staircase`` at its defaults: the synthetic corpus, 2,000 steps) is timed the
same way: training as ``ctxstair lm train --no-analysis`` does it (snapshots are written either
way), then the analysis ``lm_staircase`` (ρ_next, the prefix probe and its shuffled control,
attention-path correlations with their permutation null, path shares) and the report; target at
most 25 %. Both use the default ``analysis.probe=fast``. The first Adam optimizer of a process imports ``torch._dynamo``
(≈ 1.2 s here); staircase-add trains with plain gradient descent, so the probe's Adam pays for it
inside the alignment step, as it does in a real ``ctxstair run``.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from ctxstair.analysis import analyse
from ctxstair.recipes import get, write_recipe_report
from ctxstair.run import Run
from ctxstair.train import train_run

TARGET = 0.15
LM_TARGET = 0.25


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    recipe = get("staircase-add")
    cfg = recipe.runs()[""]  # train_run never analyses: the steps below are timed one by one
    with tempfile.TemporaryDirectory() as tmp:
        bare = replace(cfg, snapshots=replace(cfg.snapshots, save=False))
        # Best of 2 fresh runs each: the first training of a process also pays for warming up torch.
        train = min(_timed(lambda i=i: train_run(bare, Path(tmp) / f"bare{i}", progress=False)) for i in range(2))
        with_snapshots = min(_timed(lambda i=i: train_run(cfg, Path(tmp) / f"run{i}", progress=False))
                             for i in range(2))
        run = Path(tmp) / "run1"
        steps = [
            ("snapshot files (training with snapshots − training alone)", with_snapshots - train),
            ("alignment analysis with the probe (`alignment`)", _timed(lambda: analyse(run, ["alignment"]))),
            ("order shares (`order_shares`, theory.csv)", _timed(lambda: analyse(run, ["order_shares"]))),
            ("report (summary, figures, report.html)", _timed(lambda: write_recipe_report(run))),
        ]
        unfitted_cfg = replace(cfg, analysis=replace(cfg.analysis, probe_steps=0))
        unfitted = _timed(lambda: analyse(Run(run, unfitted_cfg), ["alignment"]))
    named = steps[0][1] + steps[1][1] + steps[2][1]  # snapshots, alignment with both probes, order shares
    overhead = sum(seconds for _, seconds in steps)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; staircase-add: {cfg.train.epochs} epochs, "
          f"{cfg.train.members} member(s), snapshots log_points={cfg.snapshots.log_points} "
          f"every={cfg.snapshots.every}\n")
    print("| step | seconds | fraction of training |\n|---|---|---|")
    print(f"| training alone (`--no-analysis`) | {train:.2f} | 1.00 |")
    for name, seconds in steps:
        print(f"| {name} | {seconds:.2f} | {seconds / train:.3f} |")
    print(f"| **snapshots + alignment + order shares** | {named:.2f} | {named / train:.3f} |")
    print(f"| all analysis (with the report) | {overhead:.2f} | {overhead / train:.3f} |")
    print(f"| *for comparison:* alignment with the probe scored but not fitted (`probe_steps=0`) | "
          f"{unfitted:.2f} | {unfitted / train:.3f} |")
    print(f"\nanalysis overhead: {100 * named / train:.1f} % of training "
          f"(target at most {100 * TARGET:.0f} %: {'met' if named / train <= TARGET else 'not met'}); "
          f"{100 * overhead / train:.1f} % with the report")
    language_model()


def language_model() -> None:
    """The same measurement for ``ctxstair lm train`` at its defaults (synthetic corpus)."""
    recipe = get("lm-staircase")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "lm"
        train = _timed(lambda: recipe.trainer(out, {"analysis.enabled": False}, False, False))
        cfg = Run(out).config
        run = Run(out, replace(cfg, analysis=replace(cfg.analysis, enabled=True)))
        analysis = _timed(lambda: analyse(run, ["lm_staircase"]))
        report = _timed(lambda: write_recipe_report(out))
        snapshots = len(run.snapshot_times())
    print(f"\n`ctxstair lm train` at its defaults ({cfg.train.steps} steps, synthetic corpus, "
          f"{snapshots} snapshots):\n")
    print("| step | seconds | fraction of training |\n|---|---|---|")
    print(f"| training (`--no-analysis`; snapshots are written) | {train:.2f} | 1.00 |")
    print(f"| **analysis (`lm_staircase`)** | {analysis:.2f} | {analysis / train:.3f} |")
    print(f"| report | {report:.2f} | {report / train:.3f} |")
    print(f"\nLM analysis overhead: {100 * analysis / train:.1f} % of training (target at most "
          f"{100 * LM_TARGET:.0f} %: {'met' if analysis / train <= LM_TARGET else 'not met'}); "
          f"{100 * (analysis + report) / train:.1f} % with the report")


if __name__ == "__main__":
    main()

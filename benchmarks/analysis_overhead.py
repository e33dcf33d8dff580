"""What the analysis costs next to training: `staircase-add` at its defaults.

    python benchmarks/analysis_overhead.py   # about 1-2 min on 2 cores; prints a Markdown table

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

The headline overhead is snapshots + alignment + probe, as a fraction
of the reference training time (target at most 15 %); the total with the order shares and the
report is printed next to it. The first Adam optimizer of a process imports ``torch._dynamo``
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
    named = steps[0][1] + steps[1][1]  # what the issue names: snapshots + alignment + probe
    overhead = sum(seconds for _, seconds in steps)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; staircase-add: {cfg.train.epochs} epochs, "
          f"{cfg.train.members} member(s), snapshots log_points={cfg.snapshots.log_points} "
          f"every={cfg.snapshots.every}\n")
    print("| step | seconds | fraction of training |\n|---|---|---|")
    print(f"| training alone (`--no-analysis`) | {train:.2f} | 1.00 |")
    for name, seconds in steps:
        print(f"| {name} | {seconds:.2f} | {seconds / train:.3f} |")
    print(f"| snapshots + alignment with the probe | {named:.2f} | {named / train:.3f} |")
    print(f"| all analysis (with order shares and report) | {overhead:.2f} | {overhead / train:.3f} |")
    print(f"| *for comparison:* alignment with the probe scored but not fitted (`probe_steps=0`) | "
          f"{unfitted:.2f} | {unfitted / train:.3f} |")
    print(f"\nanalysis overhead: {100 * named / train:.1f} % of training "
          f"(target at most {100 * TARGET:.0f} %: {'met' if named / train <= TARGET else 'not met'}); "
          f"{100 * overhead / train:.1f} % with order shares and report")


if __name__ == "__main__":
    main()

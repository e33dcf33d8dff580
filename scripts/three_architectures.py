"""The staircase on three architectures: ``lm-staircase`` on the real-text union for ``llama``,
``gpt_neox`` and ``gpt2`` at matched size, three seeds each, judged like the single-architecture
result (docs/language-models.md, "The staircase on real text").

Every run has the settings of ``docs/examples/lm-real-text`` (the union of Shakespeare, the Wikipedia
excerpt and the King James Bible; BPE 1000; windows of 64; d 64, 2 layers, 4 heads of 16, MLP 256;
γ = 1; AdamW lr 0.01, 2000 steps) with ``model.family`` and ``train.seed`` set; one torch thread, so
each run regenerates bitwise on one machine.

    python scripts/three_architectures.py run runs/architectures        # the 9 runs (resumable), then the summary
    python scripts/three_architectures.py summarise runs/architectures  # the summary of what exists

writes ``architectures.csv`` (one row per run: ρ_next at initialization, its peak and step, at the
end, the decay from the peak, the held-out loss at the peak and at the end, the recipe's verdicts,
the seconds of the session that finished the run: the whole run unless it was resumed) and
``architectures.svg`` (ρ_next against the step, one panel per family, a line per seed) into the
directory; the measured ones are kept in docs/examples/lm-architectures/ and
docs/recipes.md discusses them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

FAMILIES = ("llama", "gpt_neox", "gpt2")
SEEDS = (0, 1, 2)
#: The settings of docs/examples/lm-real-text.
SETTINGS = ["corpus.source=shakespeare+wikipedia-excerpt+kjv", "corpus.vocab_size=1000", "train.lr=0.01",
            "train.steps=2000"]
#: The recipe's judged key numbers (its summary.json), by the words they start with.
VERDICTS = {"peak": "ρ_next early peak", "decay": "ρ_next at the end"}


def run(out: Path) -> None:
    """Every run not yet complete (a ``summary.json``), one after another, then :func:`summarise`."""
    for seed in SEEDS:
        for family in FAMILIES:
            folder = out / f"{family}-s{seed}"
            if (folder / "summary.json").is_file():
                continue
            sets = [*SETTINGS, f"model.family={family}", f"train.seed={seed}"]
            subprocess.run([sys.executable, "-m", "ctxstair", "run", "lm-staircase", "--out", str(folder), "--resume",
                            *sum((["--set", s] for s in sets), [])], check=True,
                           env={**os.environ, "CTXSTAIR_THREADS": "1"})
    summarise(out)


def row_of(folder: Path) -> dict:
    """One run's numbers: ρ_next (Pearson) at step 0, its peak, at the end; held-out losses."""
    from ctxstair.analysis.lm_staircase import measure_series, read_lm_analysis
    from ctxstair.measure.schema import RHO_NEXT
    from ctxstair.rundir import read_metric_rows

    steps, rho = measure_series(read_lm_analysis(folder), RHO_NEXT)
    val = {r["step"]: r["val_loss"] for r in read_metric_rows(folder) if "val_loss" in r}
    peak = int(np.argmax(rho))
    summary = json.loads((folder / "summary.json").read_text())
    met = {name: next(k["met"] for k in summary["key_numbers"] if k["name"].startswith(words))
           for name, words in VERDICTS.items()}
    # The seconds of the session that finished the run: the whole run unless it was resumed.
    session_seconds = json.loads((folder / "resources.json").read_text())["seconds"]
    return {"run": folder.name, "rho_init": rho[0], "rho_peak": rho[peak], "peak_step": int(steps[peak]),
            "rho_end": rho[-1], "decay": (rho[peak] - rho[-1]) / rho[peak], "val_at_peak": val[int(steps[peak])],
            "val_end": val[int(steps[-1])], "peak_met": met["peak"], "decay_met": met["decay"],
            "session_seconds": session_seconds}


def figure(out: Path) -> plt.Figure:
    """ρ_next against the training step, one panel per family, a line per seed (log step axis)."""
    from ctxstair.analysis.lm_staircase import measure_series, read_lm_analysis
    from ctxstair.measure.schema import RHO_NEXT

    fig, axes = plt.subplots(1, len(FAMILIES), figsize=(10, 3.2), sharey=True, constrained_layout=True)
    for ax, family in zip(axes, FAMILIES):
        for seed in SEEDS:
            folder = out / f"{family}-s{seed}"
            if not (folder / "lm_analysis.csv").is_file():
                continue
            steps, rho = measure_series(read_lm_analysis(folder), RHO_NEXT)
            ax.plot(np.maximum(steps, 1), rho, marker=".", label=f"seed {seed}")
        ax.set_xscale("log")
        ax.set_title(family)
        ax.set_xlabel("training step (step 0 drawn at 1)")
        ax.axhline(0, color="0.7", lw=0.8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(r"$\rho_{\mathrm{next}}$ (Pearson)")
    axes[-1].legend(frameon=False)
    fig.suptitle(r"$\rho_{\mathrm{next}}$ over training on the real-text union: three architectures at "
                 r"$d = 64$, 2 layers, $\gamma = 1$")
    return fig


def summarise(out: Path) -> None:
    """Write ``architectures.csv`` and ``architectures.svg`` from the runs that exist."""
    folders = [out / f"{family}-s{seed}" for seed in SEEDS for family in FAMILIES]
    rows = [row_of(folder) for folder in folders if (folder / "summary.json").is_file()]
    with open(out / "architectures.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: f"{v:.4f}" if isinstance(v, float) else v for k, v in row.items()})
    figure(out).savefig(out / "architectures.svg")
    for row in rows:
        print(f"{row['run']:12s} init {row['rho_init']:+.3f}  peak {row['rho_peak']:.3f} at {row['peak_step']:4d}  "
              f"end {row['rho_end']:.3f} ({100 * row['decay']:.0f} % below)  loss {row['val_at_peak']:.2f} → "
              f"{row['val_end']:.2f}  peak {'✓' if row['peak_met'] else '✗'} decay {'✓' if row['decay_met'] else '✗'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("run", "summarise"))
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (run if args.command == "run" else summarise)(args.out)


if __name__ == "__main__":
    main()

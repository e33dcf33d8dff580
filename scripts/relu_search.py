"""Search the settings the paper leaves open for a ReLU CBOW that shows the collinear plateau.

The paper states ReLU for its main-text figures; with ReLU our CBOW learns ``mod`` without the
collinear plateau (docs/recipes.md, ``staircase-mod``) and ``modulus-onset`` shows no slow-down for
M | N. This script runs both recipes with ReLU over the settings the paper does not state —
optimizer and learning rate, minibatch size, γ, the embedding's d_in (V instead of d), a hidden
bias, and the mean instead of the sum of the context embeddings — and judges every setting with
the recipes' own key numbers:

* ``staircase-mod``: "collinear plateau, then learned" = the recipe's key numbers "1 − MSE during
  the plateau ≥ 0.9", "a long plateau near chance" and "the task is learned", all met, for the
  median of 3 seeds (the probe is not fitted: ``analysis.probe_steps=0``; nothing here reads it);
* ``modulus-onset``: its onset ratio (median onset for M | N over the other M, ≥ 3 met).

    python scripts/relu_search.py run runs/relu-search            # every block (resumable), then the summary
    python scripts/relu_search.py summarise runs/relu-search      # the summary of what exists

writes ``relu_search_mod.csv``, ``relu_search_onset.csv`` and ``relu_search.png`` into the
directory (the measured ones are kept in docs/examples/relu-search/; docs/recipes.md discusses
them). d_in = V for the embeddings is the γ-init std V^-γ, i.e. ``model.init.embedding`` =
γ ln V / ln d (V = 41 for ``mod`` at N = 40, V = 21 for ``modsum`` at N = 20; d = 128).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

D = 128
#: γ of the embeddings for which the init std is V^-1 (d_in = V at γ = 1).
DIN_V_MOD = round(math.log(41) / math.log(D), 3)
DIN_V_MODSUM = round(math.log(21) / math.log(D), 3)

#: Shared by every ``staircase-mod`` block: ReLU, 3 seeds, snapshots dense early (the plateau).
MOD_SHARED = ["model.activation=relu", "snapshots.log_points=20", "snapshots.every=1000", "analysis.probe_steps=0"]

#: Block name -> (shared overrides, grid) of one ``ctxstair sweep staircase-mod``.
MOD_BLOCKS: dict[str, tuple[list[str], list[str]]] = {
    "adam": (["train.epochs=3000"], ["train.lr=1e-4,3e-4,1e-3,1e-2", "model.init.gamma=1,1.5,2"]),
    "bias-pool": (["train.epochs=3000"], ["model.bias=false,true", "model.pool=sum,mean", "train.lr=1e-3,1e-2"]),
    "gd": (["train.optimizer=gd", "train.epochs=5000"], ["train.lr=0.1,0.5,2,8", "model.init.gamma=1,1.5,2"]),
    "sgd": (["train.optimizer=sgd", "train.epochs=500"], ["train.batch_size=32,128", "train.lr=0.05,0.5"]),
    "dinV-adam": ([f"model.init.embedding={DIN_V_MOD}", "train.epochs=3000"], ["train.lr=1e-3,1e-2"]),
    "gd-bias-pool": (["train.optimizer=gd", "train.lr=2", "train.epochs=5000"],
                     ["model.bias=false,true", "model.pool=sum,mean"]),
    "dinV-gd": ([f"model.init.embedding={DIN_V_MOD}", "train.optimizer=gd", "train.epochs=5000"],
                ["train.lr=0.5,2"]),
}

#: Setting name -> overrides of one ``ctxstair run modulus-onset`` (ReLU; the recipe's GD lr 2 otherwise).
ONSET_SETTINGS: dict[str, list[str]] = {
    "relu-gd2": [],
    "relu-gd0.5": ["train.lr=0.5"],
    "relu-adam1e-3": ["train.optimizer=adam", "train.lr=1e-3"],
    "relu-gamma1.5": ["model.init.gamma=1.5"],
    "relu-bias": ["model.bias=true"],
    "relu-mean": ["model.pool=mean"],
    "relu-dinV": [f"model.init.embedding={DIN_V_MODSUM}"],
}

#: Where a setting whose seeds did not all learn is drawn on the epoch axis.
NOT_LEARNED = 6000
#: The key numbers of ``staircase-mod`` that make "collinear plateau, then learned" (summary.json names).
PLATEAU_KEYS = ("order-0 1 − MSE during the plateau (max)",
                "end of the plateau: first epoch with accuracy > 2 × chance",
                "first epoch with training accuracy ≥ 95 %")


def _ctxstair(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ctxstair", *args], check=True)


def _sets(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def run(out: Path) -> None:
    """Every block and setting, each skipped or continued when it exists already."""
    for name, (shared, grid) in MOD_BLOCKS.items():
        _ctxstair("sweep", "staircase-mod", *_sets(MOD_SHARED + shared), *[a for g in grid for a in ("--grid", g)],
                  "--seeds", "3", "--workers", "1", "--out", str(out / name), "--resume")
    for name, overrides in ONSET_SETTINGS.items():
        _ctxstair("run", "modulus-onset", *_sets(["model.activation=relu", *overrides]),
                  "--out", str(out / "onset" / name), "--resume")


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if len(present) == len(values) and present else None


def mod_rows(out: Path) -> list[dict]:
    """One row per ``staircase-mod`` cell: block, cell, median 1 − MSE on the plateau, plateau end,
    learned epoch (empty when a seed never learned), best frequency, and the verdict."""
    rows = []
    for name in MOD_BLOCKS:
        for summary_path in sorted((out / name / "cells").glob("*/summary.json")):
            summary = json.loads(summary_path.read_text())
            members, met = summary["members"], {k["name"]: k["met"] for k in summary["key_numbers"]}
            rows.append(dict(
                block=name, cell=summary_path.parent.name,
                early_one_minus_mse=statistics.median(m["early_mse"] for m in members),
                plateau_end=_median([m["plateau_end"] for m in members]),
                learned=_median([m["learned"] for m in members]),
                k_star=statistics.median(m["k_star"] for m in members),
                r_star=statistics.median(m["r_star"] for m in members),
                collinear_plateau_then_learned=all(met[k] for k in PLATEAU_KEYS)))
    return rows


def onset_rows(out: Path) -> list[dict]:
    """One row per ``modulus-onset`` setting: the medians for M | N and the other M, their ratio, met."""
    rows = []
    for name in ONSET_SETTINGS:
        path = out / "onset" / name / "summary.json"
        if path.is_file():
            rule = json.loads(path.read_text())["rule"]
            rows.append(dict(setting=name, median_divides=rule["median_divides"], median_other=rule["median_other"],
                             ratio=rule["ratio"], met=rule["met"]))
    return rows


def _write_csv(path: Path, rows: list[dict]) -> None:
    if rows:
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)


def _tanh_reference() -> tuple[dict, dict]:
    """The tanh defaults' numbers from the recorded examples (docs/examples/recipes): staircase-mod's
    first member and modulus-onset's rule."""
    examples = Path(__file__).resolve().parents[1] / "docs" / "examples" / "recipes"
    mod = json.loads((examples / "staircase-mod" / "summary.json").read_text())["members"][0]
    return mod, json.loads((examples / "modulus-onset" / "summary.json").read_text())["rule"]


def figure(mod: list[dict], onset: list[dict]) -> plt.Figure:
    """Left: every ``staircase-mod`` setting as a point (epoch learned, 1 − MSE on the plateau), the
    0.9 line of the recipe and the tanh default; right: the onset ratio of every ``modulus-onset``
    setting next to the tanh default, the 3× line."""
    tanh_mod, tanh_onset = _tanh_reference()
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    for i, name in enumerate(MOD_BLOCKS):
        block = [r for r in mod if r["block"] == name]
        left.scatter([r["learned"] or NOT_LEARNED for r in block], [r["early_one_minus_mse"] for r in block],
                     label=f"ReLU: {name}", color=f"C{i}", s=40, marker="o" if i < 5 else "s")
    left.scatter([tanh_mod["learned"]], [tanh_mod["early_mse"]], marker="*", s=250, color="k",
                 label="tanh default (Adam lr 1e-2)")
    left.axhline(0.9, color="k", lw=0.8, ls="--")
    left.text(0.02, 0.91, "collinear: the recipe's 1 − MSE ≥ 0.9", fontsize=8, transform=left.get_yaxis_transform())
    left.set_xscale("log")
    left.set_ylim(-0.1, 1.1)
    left.set_xlabel(f"epoch of ≥ 95 % training accuracy (median of 3 seeds; {NOT_LEARNED} = not learned)")
    left.set_ylabel("largest order-0 1 − MSE on the plateau")
    left.set_title("staircase-mod: the collinear plateau, ReLU settings vs tanh", fontsize=11)
    left.legend(fontsize=8, loc="center right")
    names = [r["setting"] for r in onset] + ["tanh default (GD lr 2)"]
    ratios = [r["ratio"] for r in onset] + [tanh_onset["ratio"]]
    right.barh(names, ratios, color=["C0"] * len(onset) + ["k"])
    for y, row in enumerate(onset):
        if row["median_divides"] >= 5000:  # censored: the ratio is a lower bound
            right.text(row["ratio"], y, " ≥ (M | N runs not learned by the cap)", va="center", fontsize=8)
    right.axvline(3, color="k", lw=0.8, ls="--")
    right.set_xlabel("onset ratio: median epoch of 95 % accuracy, M | N over the other M")
    right.set_title("modulus-onset (F9): ratio ≥ 3 expected", fontsize=11)
    fig.tight_layout()
    return fig


def summarise(out: Path) -> None:
    """The two tables and the figure from the run directories under ``out``."""
    mod, onset = mod_rows(out), onset_rows(out)
    _write_csv(out / "relu_search_mod.csv", mod)
    _write_csv(out / "relu_search_onset.csv", onset)
    figure(mod, onset).savefig(out / "relu_search.png", dpi=120)
    for row in mod + onset:
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run", "summarise"])
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run(args.out)
    summarise(args.out)


if __name__ == "__main__":
    main()

"""What signatures do for learning: fixed signature embeddings (SPEC §8 F8b), ``signature-embeddings``.

    ctxstair run signature-embeddings --out runs/signature-embeddings   # about 1.5 min on 2 CPU cores

CBOW (d = 128, tanh, γ = 1) on F_mod (``mod``, N = 40, L = 2) with three embedding modes
(``model.embedding``, ``models/cbow.py``): (i) ``signature``, fixed w_α = λ R φ^{y;1}_α v;
(ii) ``trainable``; (iii) ``random``, fixed λ v_α; 3 seeds each, 1000 epochs. Each mode is trained
with two optimizers, one part per (optimizer, mode): full-batch gradient descent lr 2 (the discrete
gradient flow of SPEC §6, as ``staircase-add``) and Adam lr 1e-2 (as ``staircase-mod``). Both are run
because the answer depends on it (docs/recipes.md): under gradient descent the trainable model stays on
its small-initialization plateau for the whole budget while the fixed-embedding models learn in a few
hundred epochs; Adam's normalised steps let the trainable model leave the plateau at epoch ≈ 100 and
reach 95 % as fast as (i). "Early" is the mean training accuracy over epochs 0..100 (the first tenth of
the budget; under Adam the trainable model's plateau lasts to about epoch 100, staircase-mod).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair.analysis import measures as ms
from ctxstair.analysis.measures import LEARNED_ACC
from ctxstair.config import AnalysisConfig, InitConfig, ModelConfig, RunConfig, TaskConfig, TrainConfig
from ctxstair.recipes.base import Figures, KeyNumber, Paper, TrainedRecipe, register
from ctxstair.report import learning_figures
from ctxstair.report.formats import fmt
from ctxstair.run import Run

MODES = {"signature": "(i) signature λRφv", "trainable": "(ii) trainable", "random": "(iii) random λv"}
#: What SPEC §8 F8b leads one to expect of each mode (judged in the comparison rows of the report).
EXPECTED = {"signature": "converges much faster than (ii)", "trainable": "a plateau near chance first (staircase-mod)",
            "random": "learns from the start: above (ii) early"}
OPTIMIZERS = {"gd": 2.0, "adam": 1e-2}
#: "Early" = epochs 0..EARLY_EPOCHS (inclusive): the first tenth of the default budget.
EARLY_EPOCHS = 100


def _config(optimizer: str, mode: str) -> RunConfig:
    return RunConfig(recipe="signature-embeddings", task=TaskConfig("mod", {"N": 40}),
                     model=ModelConfig(d=128, activation="tanh", embedding=mode, init=InitConfig(gamma=1.0)),
                     train=TrainConfig(optimizer=optimizer, lr=OPTIMIZERS[optimizer], epochs=1000, members=3),
                     analysis=AnalysisConfig(enabled=False))


def embedding_rows(run: Path) -> list[dict]:
    """One row per member of an F8b part: optimizer, lr, N, mode, seed, epochs to 95 % (None if never),
    mean accuracy over epochs 0..EARLY_EPOCHS and final accuracy."""
    cfg = Run(run).config
    rows = []
    for m in ms.members(run):
        epochs, acc = ms.metric_series(run, m, "acc")
        rows.append({"optimizer": cfg.train.optimizer, "lr": cfg.train.lr, "N": cfg.task.params["N"],
                     "mode": cfg.model.embedding, "seed": cfg.train.seed + m,
                     "epochs_to_95": ms.learned_epoch(epochs, acc),
                     "early_accuracy": float(acc[epochs <= EARLY_EPOCHS].mean()), "final_accuracy": float(acc[-1]),
                     "epochs": int(epochs[-1])})
    return rows


def optimizer_numbers(rows: list[dict], opt: str) -> dict:
    """The comparison of the three modes under optimizer ``opt``: the rows per mode (``by``), the cap
    (last epoch), the median onset per mode (:func:`~ctxstair.analysis.measures.median_onset`), whether
    (i) learns in fewer epochs than (ii) (``signature_faster``) and the mean early accuracy per mode."""
    by = {mode: [r for r in rows if r["optimizer"] == opt and r["mode"] == mode] for mode in MODES}
    onset = {mode: ms.median_onset([r["epochs_to_95"] for r in rs]) for mode, rs in by.items()}
    return dict(by=by, cap=max(r["epochs"] for r in rows if r["optimizer"] == opt), onset=onset,
                signature_faster=bool(onset["signature"] < onset["trainable"]),
                early={mode: float(np.mean([r["early_accuracy"] for r in rs])) for mode, rs in by.items()})


def measure(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of ``signature-embeddings``: the rows of each part (``per_part``) and of all
    (``rows``), the optimizers in order, and :func:`optimizer_numbers` of each (``by_optimizer``)."""
    per_part = {part: embedding_rows(run) for part, run in paths.items()}
    rows = [row for part_rows in per_part.values() for row in part_rows]
    optimizers = list(dict.fromkeys(r["optimizer"] for r in rows))
    return dict(per_part=per_part, rows=rows, optimizers=optimizers,
                by_optimizer={opt: optimizer_numbers(rows, opt) for opt in optimizers})


def _onset_text(onset: dict[str, float]) -> dict[str, str]:
    """Mode -> its median onset for a report, 'never' when it is infinite."""
    return {mode: "never" if np.isinf(v) else f"{v:g}" for mode, v in onset.items()}


def judge(n: dict) -> list[KeyNumber]:
    """Per optimizer, each mode's onsets (reported) and the two comparisons of SPEC §8 F8b (judged)."""
    keys = []
    for opt, o in n["by_optimizer"].items():
        by, early, text = o["by"], o["early"], _onset_text(o["onset"])
        for mode, label in MODES.items():
            keys.append(KeyNumber(f"{opt}: {label}: epochs to {LEARNED_ACC:.0%} training accuracy (per seed)",
                                  f"{learning_figures.onsets_text(by[mode])} (median {text[mode]}; cap {o['cap']}); "
                                  f"mean accuracy over epochs 0..{EARLY_EPOCHS}: {fmt(early[mode])}",
                                  EXPECTED[mode], None))
        keys.append(KeyNumber(f"{opt}: (i) signature vs (ii) trainable, median epochs to {LEARNED_ACC:.0%}",
                              f"{text['signature']} vs {text['trainable']}", "(i) fewer epochs than (ii) (SPEC §8 F8b)",
                              o["signature_faster"]))
        keys.append(KeyNumber(f"{opt}: (iii) random vs (ii) trainable early "
                              f"(mean accuracy over epochs 0..{EARLY_EPOCHS})",
                              f"{fmt(early['random'])} vs {fmt(early['trainable'])}", "(iii) higher than (ii)",
                              bool(early["random"] > early["trainable"])))
    return keys


def describe(n: dict) -> str:
    """The paragraph of ``signature-embeddings`` from :func:`measure`."""
    lines = []
    for opt, o in n["by_optimizer"].items():
        by, early = o["by"], o["early"]
        lines.append(f"With {opt} the signature embeddings reach {LEARNED_ACC:.0%} at epochs "
                     f"{learning_figures.onsets_text(by['signature'])}, "
                     f"the trainable ones at {learning_figures.onsets_text(by['trainable'])} and the random ones at "
                     f"{learning_figures.onsets_text(by['random'])} "
                     f"(cap {o['cap']}): (i) is {'faster' if o['signature_faster'] else 'not faster'} than (ii), "
                     "and over epochs "
                     f"0..{EARLY_EPOCHS} (iii) averages {fmt(early['random'])} against "
                     f"{fmt(early['trainable'])} for (ii).")
    return (
        f"CBOW on F_mod (N = {n['rows'][0]['N']}) with fixed signature embeddings λ R φ^(y;1)_α v, ordinary trainable "
        "embeddings, and fixed random embeddings λ v_α; in the fixed modes only the scalar λ and W_U learn. "
        + " ".join(lines)
        + " The fixed modes have no plateau: their embeddings already tell the tokens apart, so W_U learns at once; "
        "the trainable model first has to leave the collinear small-initialization plateau (staircase-mod)."
    )


def draw(paths: dict[str, Path], n: dict) -> Figures:
    """Training accuracy per embedding mode, one panel per optimizer."""
    return {"accuracy.png": ("Training accuracy per embedding mode (mean over seeds, band: min–max), one panel "
                             "per optimizer.", learning_figures.embedding_modes_figure(
                                 paths, n["per_part"], n["optimizers"], n["rows"][0]["N"], MODES, LEARNED_ACC,
                                 EARLY_EPOCHS))}


register(TrainedRecipe(
    name="signature-embeddings", figure="SPEC §8 F8b",
    expectation="(i) fixed signature embeddings λRφv reach 95 % in fewer epochs than (ii) trainable ones; (iii) fixed "
                "random embeddings beat (ii) early (epochs 0..100); with gradient descent and with Adam",
    cpu_time="≈ 1.5 min",
    paper=Paper("(i) fixed signature embeddings converge much faster than (ii) trainable ones; "
                "(iii) fixed random ones beat (ii) early",
                "CBOW on F_mod with (i) fixed w_α = λ R φ^(y;1)_α v (R, v random, λ trained), "
                "(ii) trainable, (iii) fixed random λ v_α; d = 128, ReLU, small init, full dataset"),
    runs=lambda: {f"{opt}-{mode}": _config(opt, mode) for opt in OPTIMIZERS for mode in MODES},
    measure=measure, judge=judge, describe=describe, draw=draw, summary=lambda n: {"members": n["rows"]},
    member_rows=lambda n: [{k: v for k, v in r.items() if k != "epochs"} for r in n["rows"]],
))

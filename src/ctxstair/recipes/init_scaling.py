"""Low-order dominance at initialization (SPEC §6.2, §8 "derived checks"): ``init-scaling``.

    ctxstair run init-scaling --out runs/init-scaling          # a few seconds on 2 CPU cores
    ctxstair run init-scaling --set gamma=[0.7,1.0] --set d=[64,256,1024] --seeds 40

No training: for each γ and width d, ``seeds`` initializations as a training run draws them
(std ``d^{−γ}`` for W_E and W_U, SPEC §4), the label-driven flow of every task token is split into
its signature orders (:func:`ctxstair.theory.cbow_label_terms`), and the slope of
``log(RMS_m / RMS_0)`` against ``log d`` is compared with the prediction ``−mγ``.

Defaults, and why: ``sum_mod`` with N = 6, L = 3 (216 sequences; all orders 0..2 exist and the
order-2 signature is the one that carries the label), ``σ(z) = z + z² + z³`` (every ``C_k`` non-zero,
so order m starts at degree m+1 and the prediction is ``−mγ``), d = 32..1024, γ ∈ {0.6, 0.8, 1.0},
20 seeds. ``met`` is judged for γ >= 0.8; at γ = 0.6 the next-degree corrections (relatively
``O(d^{−2γ})`` with a large constant, :mod:`ctxstair.theory.scaling`) are still visible at small d.

Parameters (``--set KEY=VALUE``): ``task`` and ``task.<param>``, ``coeffs``, ``d``, ``gamma``,
``seeds`` (also ``--seeds``), ``seed``.

Files: ``init_scaling.csv`` (``gamma, d, seed, order, mean_square``: the mean over task tokens and
coordinates of the squared order-m term of one initialization) and ``recipe.json`` (the resolved
parameters); ``summary.json``, ``figures/`` and ``report.html`` are rebuilt from them.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ctxstair import rundir, tasks
from ctxstair.errors import InputError
from ctxstair.io import atomic_write_text
from ctxstair.recipes.base import ComputedRecipe, Figures, KeyNumber, Paper, register
from ctxstair.report import scaling_figures
from ctxstair.report.formats import fmt
from ctxstair.theory import fit_order_slopes, init_order_mean_squares, label_max_order, order_rms_ratios

DEFAULTS: dict[str, Any] = {"task": "sum_mod", "task.N": 6, "task.L": 3, "coeffs": [1.0, 1.0, 1.0],
                            "d": [32, 64, 128, 256, 512, 1024], "gamma": [0.6, 0.8, 1.0], "seeds": 20, "seed": 0}
#: Slopes are judged (``met``) for γ at or above this value, within ``TOLERANCE`` of the prediction.
JUDGED_GAMMA = 0.8
TOLERANCE = 0.1
DATA_FILE = "init_scaling.csv"
_COLUMNS = ("gamma", "d", "seed", "order", "mean_square")


def scaling_params(overrides: dict[str, Any]) -> dict[str, Any]:
    """Defaults with ``overrides`` applied and checked (InputError naming the key otherwise)."""
    unknown = [k for k in overrides if k not in DEFAULTS and not k.startswith("task.")]
    if unknown:
        raise InputError(f"unknown init-scaling parameter(s) {', '.join(unknown)}; allowed: "
                         f"{', '.join(DEFAULTS)} and task.<param>")
    if "task" in overrides and overrides["task"] != DEFAULTS["task"]:  # another task: its own defaults
        base = {k: v for k, v in DEFAULTS.items() if not k.startswith("task.")}
    else:
        base = dict(DEFAULTS)
    params = {**base, **overrides}
    for key in ("coeffs", "d", "gamma"):
        params[key] = list(params[key]) if isinstance(params[key], (list, tuple)) else [params[key]]
        if not params[key] or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in params[key]):
            raise InputError(f"{key} must be a number or a non-empty list of numbers, got {params[key]!r}")
    params["coeffs"] = [float(c) for c in params["coeffs"]]
    params["gamma"] = sorted({float(g) for g in params["gamma"]})
    params["d"] = sorted(set(params["d"]))
    if not all(isinstance(d, int) and d >= 1 for d in params["d"]) or len(params["d"]) < 3:
        raise InputError(f"d must list at least 3 distinct integer widths >= 1, got {params['d']!r}")
    if not all(g > 0 for g in params["gamma"]):
        raise InputError(f"gamma values must be > 0, got {params['gamma']!r}")
    for key, low in (("seeds", 1), ("seed", 0)):
        if isinstance(params[key], bool) or not isinstance(params[key], int) or params[key] < low:
            raise InputError(f"{key} must be an integer >= {low}, got {params[key]!r}")
    dataset = _dataset(params)  # a bad task or task parameter fails here, before anything is written
    if label_max_order(dataset.seq_len, len(params["coeffs"])) < 1:
        raise InputError(f"init-scaling needs an order 1 to compare with order 0: sequences of length L >= 2 and "
                         f"at least two coeffs; got L = {dataset.seq_len}, coeffs {params['coeffs']}")
    return params


def _dataset(params: dict[str, Any]) -> tasks.Dataset:
    return tasks.make(params["task"], **{k[5:]: v for k, v in params.items() if k.startswith("task.")})


def compute_scaling(out: Path, params: dict[str, Any]) -> None:
    """Measure the order mean squares at initialization and write ``init_scaling.csv``."""
    mean_squares = init_order_mean_squares(_dataset(params), params["d"], params["gamma"], params["seeds"],
                                           params["coeffs"], params["seed"])
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(_COLUMNS)
    for index, value in np.ndenumerate(mean_squares):
        g, i, s, m = index
        writer.writerow([repr(params["gamma"][g]), params["d"][i], params["seed"] + s, m, repr(float(value))])
    atomic_write_text(out / DATA_FILE, buffer.getvalue())


def read_scaling(out: Path) -> tuple[list[float], list[int], np.ndarray]:
    """(gammas, widths, mean squares (G, D, seeds, M+1)) from ``init_scaling.csv``."""
    path = out / DATA_FILE
    if not path.is_file():
        raise InputError(f"{path} not found: is {out} an init-scaling output directory?")
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    gammas = sorted({float(r["gamma"]) for r in rows})
    widths = sorted({int(r["d"]) for r in rows})
    seeds = sorted({int(r["seed"]) for r in rows})
    orders = sorted({int(r["order"]) for r in rows})
    table = np.full((len(gammas), len(widths), len(seeds), len(orders)), np.nan)
    for r in rows:
        table[gammas.index(float(r["gamma"])), widths.index(int(r["d"])), seeds.index(int(r["seed"])),
              int(r["order"])] = float(r["mean_square"])
    return gammas, widths, table


def measure(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of ``init-scaling`` from ``recipe.json`` and ``init_scaling.csv``: the parameters,
    γ's, widths and mean squares, the RMS ratios (G, D, M+1) and the slope fits per γ (``fits``)."""
    params = rundir.read_json(out, "recipe.json", keys=("params",))["params"]
    gammas, widths, mean_squares = read_scaling(out)
    ratios = order_rms_ratios(mean_squares)  # (G, D, M+1)
    return dict(params=params, gammas=gammas, widths=widths, seeds=mean_squares.shape[2], ratios=ratios,
                fits={g: fit_order_slopes(widths, ratios[i], g, params["coeffs"]) for i, g in enumerate(gammas)})


def judge(n: dict) -> list[KeyNumber]:
    """One key number per (γ, order): the slope against its prediction, judged for γ ≥ JUDGED_GAMMA."""
    keys = []
    for g, per_order in n["fits"].items():
        for f in per_order:
            met = bool(f.within(TOLERANCE)) if g >= JUDGED_GAMMA and np.isfinite(f.slope) else None
            rule = "−mγ" if np.isclose(f.predicted, -f.order * g) else "−(k_m − k_0)γ, leading degrees of σ"
            keys.append(KeyNumber(
                f"γ = {g:g}, order m = {f.order}: slope of log(RMS_m / RMS_0) against log d",
                f"{fmt(f.slope)} (95 % CI {fmt(f.ci_low)} … {fmt(f.ci_high)})",
                f"{rule} = {fmt(f.predicted, 2)}, within ±{TOLERANCE:g}"
                + ("" if g >= JUDGED_GAMMA else f" (not judged below γ = {JUDGED_GAMMA:g})"), met))
    return keys


def describe(n: dict) -> str:
    """The paragraph of ``init-scaling`` from :func:`measure`."""
    params = n["params"]
    task = ", ".join(f"{k[5:]} = {v}" for k, v in params.items() if k.startswith("task."))
    sigma = " + ".join(f"{c:g}·z^{k}" for k, c in enumerate(params["coeffs"], 1) if c)
    return (
        f"At initialization (no training) the label-driven flow of each token of {params['task']} ({task}) is split "
        f"into signature orders for σ(z) = {sigma}, over {n['seeds']} seeds per width d ∈ {n['widths']} and "
        f"γ ∈ {n['gammas']}. The order-m share shrinks like a power of d: "
        + "; ".join(f"γ = {g:g}: " + ", ".join(f"m = {f.order} slope {fmt(f.slope, 2)} vs {fmt(f.predicted, 2)}"
                                             for f in per_order) for g, per_order in n["fits"].items())
        + ". Low orders dominate at initialization, the more so the smaller the initialization (larger γ)."
    )


def draw(paths: dict[str, Path], n: dict) -> Figures:
    """The RMS ratios against the width with their fits and predictions."""
    return {"init_scaling.png": (
        "RMS of the order-m label-driven term over the order-0 term at initialization against the width d "
        "(log–log), one colour per γ; solid: least-squares fit, dashed: the predicted slope "
        "(−mγ for this σ) through the same centre.",
        scaling_figures.scaling_figure(n["widths"], n["gammas"], n["ratios"], n["fits"]))}


def summarise(n: dict) -> dict:
    """``summary.json`` of ``init-scaling``: the parameters, widths, γ's, RMS ratios and every fit."""
    return {"params": n["params"], "widths": n["widths"], "gammas": n["gammas"], "rms_ratio": n["ratios"],
            "fits": [asdict(f) for per_order in n["fits"].values() for f in per_order]}


register(ComputedRecipe(
    name="init-scaling", figure="SPEC §8 (§6.2)",
    expectation="slope of log(RMS_m / RMS_0) against log d at initialization ≈ −mγ "
                "(m = 1, 2; within ±0.1 for γ ≥ 0.8)",
    cpu_time="≈ 3 s",
    paper=Paper("not a paper figure (SPEC §8's derived check of §6.2): the slope of log(order-m RMS / "
                "order-0 RMS) against log d at initialization ≈ −mγ",
                "not stated: a computation at initialization"),
    params=scaling_params, compute=compute_scaling,
    measure=measure, judge=judge, describe=describe, draw=draw, summary=summarise,
))

"""The Context Staircase (SPEC §8 F3): ``staircase-add`` and ``staircase-mod`` at N = 40.

    ctxstair run staircase-add --out runs/staircase-add        # about 30 s on 2 CPU cores

Defaults, and why (docs/recipes.md has the measurements):

* ``staircase-add``: ReLU, full-batch gradient descent (the discrete analogue of the gradient flow
  the theory describes), lr 2, γ = 1, 3000 epochs. With Adam (lr 1e-3) the order-0 → order-1
  crossing is the same but the late odd/even split does not form.
* ``staircase-mod``: tanh, Adam lr 1e-2, γ = 1, 1000 epochs. With ReLU the gate σ'(h) = 1{h > 0}
  depends on each token's random initial embedding, every token drifts in its own direction, the
  embeddings never become collinear and the task is learned without the plateau; a smooth
  activation with σ'(0) = 1 shows the collinear plateau and the k = 19 ring of the paper.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.analysis import measures as ms
from ctxstair.analysis.order_shares import read_order_shares
from ctxstair.config import InitConfig, ModelConfig, RunConfig, TaskConfig, TrainConfig
from ctxstair.recipes.base import SPEC8_SETTINGS, Figures, KeyNumber, Paper, TrainedRecipe, members_summary, register
from ctxstair.report import run_figures
from ctxstair.report.formats import fmt


def _config(name: str, task: str, activation: str, optimizer: str, lr: float, epochs: int) -> RunConfig:
    return RunConfig(recipe=name, task=TaskConfig(task, {"N": 40}),
                     model=ModelConfig(d=128, activation=activation, init=InitConfig(gamma=1.0)),
                     train=TrainConfig(optimizer=optimizer, lr=lr, epochs=epochs))


def _figures(run: Path, early: int, late: int) -> Figures:
    """The staircase, Fourier, geometry and PCA figures of one run, the geometry early and late."""
    return {
        "staircase.png": ("The staircase plot: alignment with each signature order (top) and loss/accuracy "
                          "(bottom) over training.", run_figures.staircase_figure(run)),
        "fourier.png": ("Fourier view: alignment with order-1 signatures through c_k, per snapshot and k.",
                        run_figures.fourier_heatmap(run)),
        "geometry.png": (f"Embedding similarity early (epoch {early}) and late (epoch {late}) next to the "
                         "signature geometries.", run_figures.geometry_figure(run, [early, late])),
        "pca.png": ("PCA of the embeddings early and late next to PCA of the signatures.",
                    run_figures.pca_figure(run, [early, late])),
    }


def member_add_numbers(run: Path, m: int) -> dict:
    """The staircase numbers of one member of an ``add`` run: the order-0 peak
    (:func:`~ctxstair.analysis.measures.order0_peak`), the probes at the end, the odd/even split, the
    best frequency and the accuracy."""
    table = rundir.read_alignment(run)
    epochs, r0 = rundir.alignment_series(table, "order0", m)
    _, probe = rundir.alignment_series(table, "order1_probe", m)
    _, probe0 = rundir.alignment_series(table, "order1_probe_zero_mean", m)
    ks, _ = ms.fourier_profile(run, m, int(epochs[-1]))
    _, half = rundir.alignment_series(table, f"fourier_k{ks.max()}", m)
    loss_epochs, loss = ms.metric_series(run, m, "loss")
    acc_epochs, acc = ms.metric_series(run, m, "acc")
    peak = ms.order0_peak(run, m, table)
    k_star, r_star = ms.best_frequency(*ms.fourier_profile(run, m, int(epochs[-1])))
    return dict(peak=float(r0[peak]), peak_epoch=int(epochs[peak]),
                peak_loss=ms.value_at(loss_epochs, loss, epochs[peak]),
                halfway=ms.halfway_loss(loss), end=float(r0[-1]), probe_end=float(probe[-1]),
                probe0_end=float(probe0[-1]),
                acc_end=float(acc[-1]), acc_full=ms.learned_epoch(acc_epochs, acc, 1.0),
                k_half=int(ks.max()), half_at_peak=float(half[peak]), half_end=float(half[-1]),
                k_star=k_star, r_star=r_star, last_epoch=int(epochs[-1]))


#: The odd/even alignment must rise by this much from the order-0 peak to the end (F1's late split).
SPLIT_RISE = 0.1


def measure_add(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of ``staircase-add``: per member (``per``), their medians (``med``), member 0
    (``first``), the odd/even split's rise and the order shares of ``theory.csv`` (None without it)."""
    run = paths[""]
    per = [member_add_numbers(run, m) for m in ms.members(run)]
    med = ms.medians(per, [key for key in per[0] if key not in ("acc_full",)])
    first = per[0]
    return dict(per=per, med=med, first=first, split_rise=med["half_end"] - med["half_at_peak"],
                shares=order_shares(run, first["peak_epoch"], first["last_epoch"]))


def judge_add(n: dict) -> list[KeyNumber]:
    """The key numbers of ``staircase-add`` from :func:`measure_add`."""
    med, first = n["med"], n["first"]
    keys = [
        KeyNumber("order-0 Pearson at its early peak",
                  f"{fmt(med['peak'])} at epoch {first['peak_epoch']} (loss {fmt(first['peak_loss'], 2)}; "
                  f"halfway {fmt(first['halfway'], 2)})",
                  "≥ 0.95, before the loss has fallen halfway", bool(med["peak"] >= 0.95)),
        KeyNumber("order-0 Pearson at the end", f"{fmt(med['end'])} (drop {fmt(med['peak'] - med['end'])})",
                  "at least 0.05 below the early peak", bool(med["peak"] - med["end"] >= 0.05)),
        KeyNumber("held-out order-1 probe at the end", f"{fmt(med['probe_end'])} vs order 0 {fmt(med['end'])}",
                  "above the order-0 score", bool(med["probe_end"] > med["end"])),
        KeyNumber("zero-mean order-1 probe (v ⟂ 1) at the end", fmt(med["probe0_end"]),
                  "high: order 1 beyond order 0 explains the late geometry", None),
        KeyNumber("training accuracy at the end",
                  f"{fmt(med['acc_end'])} (100 % first at epoch {first['acc_full']})",
                  "100 %", bool(med["acc_end"] >= 1.0)),
        KeyNumber(f"odd/even split: alignment with order 1 via c_k, k = N/2 = {first['k_half']}",
                  f"{fmt(med['half_at_peak'])} at the order-0 peak → {fmt(med['half_end'])} at the end",
                  f"rises by ≥ {SPLIT_RISE:g} as the task is learned (late odd/even split, SPEC §8 F1/F3)",
                  bool(n["split_rise"] >= SPLIT_RISE)),
        KeyNumber("best Fourier frequency k ≥ 1 at the end", f"k = {first['k_star']} (r = {fmt(first['r_star'])})",
                  "the paper saw k = 20 late at N = 40", None),
    ]
    return keys + ([] if n["shares"] is None else judge_shares(n["shares"]))


def describe_add(n: dict) -> str:
    """The paragraph of ``staircase-add`` from :func:`measure_add`."""
    med, first = n["med"], n["first"]
    return (
        f"Trained from small initialization (γ = 1), the embeddings first line up with the order-0 label signature: "
        f"the order-0 Pearson correlation peaks at {fmt(med['peak'])} around epoch {first['peak_epoch']}, while the "
        f"loss is still above halfway. As the task is learned (accuracy {fmt(med['acc_end'])} at the end) the "
        f"order-0 alignment falls to {fmt(med['end'])} and the held-out order-1 probe stays higher "
        f"({fmt(med['probe_end'])}): order-1 structure takes over. The alignment through the k = N/2 (odd/even) "
        f"cosine probe goes from {fmt(med['half_at_peak'])} to {fmt(med['half_end'])}: "
        + ("an odd/even component forms late." if n["split_rise"] >= SPLIT_RISE else "no clear odd/even split forms.")
        + ("" if n["shares"] is None else describe_shares(n["shares"]))
    )


def draw_add(paths: dict[str, Path], n: dict) -> Figures:
    """The figures of ``staircase-add``; the order shares when ``theory.csv`` was written."""
    run = paths[""]
    figures = _figures(run, n["first"]["peak_epoch"], n["first"]["last_epoch"])
    if n["shares"] is not None:
        figures["order_shares.png"] = ("The staircase in gradient space: each order's share of the label-driven "
                                       "gradient and its cosine with the actual update.",
                                       run_figures.order_shares_figure(run))
    return figures


def order_shares(run: Path, early: int, late: int) -> dict | None:
    """The numbers of ``theory.csv`` (member 0; SPEC §6.1), None when the run has none: the cosine of
    the order-0 and order-1 terms with the actual update (``cos[epoch, order]``) and order 1's share
    of the label-driven gradient norm at epochs ``early`` (the order-0 peak) and ``late``, and the
    decomposition's largest relative residual."""
    if not (run / "theory.csv").is_file():
        return None
    table = read_order_shares(run)

    def at(epoch: int, order: int, column: str) -> float:
        rows = (table["member"] == 0) & (table["epoch"] == epoch) & (table["order"] == order)
        return float(table[column][rows][0])

    return dict(early=early, late=late, cos={(e, m): at(e, m, "cosine_with_update") for e in (early, late)
                                             for m in (0, 1)},
                share_early=at(early, 1, "share"), share_late=at(late, 1, "share"),
                residual=float(table["relative_residual"].max()))


def judge_shares(s: dict) -> list[KeyNumber]:
    """Which order's term points along the actual update early and late, and whether order 1's share
    grows, from :func:`order_shares`."""
    early, late, cos = s["early"], s["late"], s["cos"]
    return [
        KeyNumber(f"cosine of the order-0 / order-1 term with the actual update at epoch {early}",
                  f"{fmt(cos[early, 0])} / {fmt(cos[early, 1])}", "order 0 drives the embeddings first",
                  cos[early, 0] > cos[early, 1]),
        KeyNumber(f"cosine of the order-0 / order-1 term with the actual update at epoch {late}",
                  f"{fmt(cos[late, 0])} / {fmt(cos[late, 1])}", "order 1 drives them late",
                  cos[late, 1] > cos[late, 0]),
        KeyNumber("order-1 share of the label-driven gradient norm", f"{fmt(s['share_early'])} at epoch {early} → "
                  f"{fmt(s['share_late'])} at epoch {late} (decomposition residual ≤ "
                  f"{fmt(s['residual'], 2)})", "grows later", s["share_late"] > s["share_early"]),
    ]


def describe_shares(s: dict) -> str:
    """The paragraph's sentence on the order shares, from :func:`order_shares`."""
    early, late, cos = s["early"], s["late"], s["cos"]
    return (f" In gradient space the order-0 term points along the actual update early (cosine {fmt(cos[early, 0])} "
            f"vs {fmt(cos[early, 1])} for order 1 at epoch {early}) and the order-1 term late "
            f"({fmt(cos[late, 1])} vs {fmt(cos[late, 0])} at epoch {late}).")


#: Order-0 1 − MSE at which the embeddings count as collinear.
COLLINEAR = 0.9


def member_mod_numbers(run: Path, m: int) -> dict:
    """The staircase numbers of one member of a ``mod`` run: collinear plateau, learning, ring."""
    table = rundir.read_alignment(run)
    epochs, _ = rundir.alignment_series(table, "order0", m)
    _, one_minus_mse = rundir.alignment_series(table, "order0", m, "one_minus_mse")
    defined = table["defined"][(table["signature"] == "order0") & (table["member"] == m)]
    _, probe = rundir.alignment_series(table, "order1_probe", m)
    acc_epochs, acc = ms.metric_series(run, m, "acc")
    chance = ms.chance_accuracy(run)
    plateau_end = ms.first_epoch(acc_epochs, acc > 2 * chance)
    learned = ms.learned_epoch(acc_epochs, acc)
    in_plateau = epochs < (plateau_end if plateau_end is not None else epochs[-1] + 1)
    early_mse = float(np.nanmax(np.where(in_plateau, one_minus_mse, -np.inf))) if in_plateau.any() else float("nan")
    k_star, r_star = ms.best_frequency(*ms.fourier_profile(run, m, int(epochs[-1])))
    return dict(any_defined=bool(defined.any()), early_mse=early_mse, plateau_end=plateau_end, learned=learned,
                chance=chance, acc_end=float(acc[-1]), probe_end=float(probe[-1]), k_star=k_star, r_star=r_star,
                early_epoch=int(epochs[in_plateau][-1]) if in_plateau.any() else 0, last_epoch=int(epochs[-1]))


def measure_mod(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of ``staircase-mod``: per member (``per``), member 0 (``first``), the medians of the
    plateau's 1 − MSE (``early_mse``) and of the final probe (``probe_end``)."""
    run = paths[""]
    per = [member_mod_numbers(run, m) for m in ms.members(run)]
    return dict(per=per, first=per[0], early_mse=ms.median([p["early_mse"] for p in per]),
                probe_end=ms.median([p["probe_end"] for p in per]))


def judge_mod(n: dict) -> list[KeyNumber]:
    """The key numbers of ``staircase-mod`` from :func:`measure_mod`."""
    per, first, early_mse = n["per"], n["first"], n["early_mse"]
    plateau = [p["plateau_end"] for p in per]
    undefined = not any(p["any_defined"] for p in per)
    return [
        KeyNumber("order-0 alignment", "undefined at every snapshot" if undefined else "defined at some snapshot",
                  "undefined (all order-0 signatures are equal)", undefined),
        KeyNumber("order-0 1 − MSE during the plateau (max)", fmt(early_mse),
                  f"≈ 1 (embeddings collinear early); met if ≥ {COLLINEAR:g}", bool(early_mse >= COLLINEAR)),
        KeyNumber("end of the plateau: first epoch with accuracy > 2 × chance",
                  f"epoch {first['plateau_end']} (chance = {fmt(first['chance'])})",
                  "a long plateau near chance before learning", bool(all(p is not None and p >= 20 for p in plateau))),
        KeyNumber("first epoch with training accuracy ≥ 95 %", str(first["learned"]), "the task is learned",
                  all(p["learned"] is not None for p in per)),
        KeyNumber("best Fourier frequency k ≥ 1 at the end", f"k = {first['k_star']} (r = {fmt(first['r_star'])})",
                  "a non-zero frequency with r ≥ 0.3 (the paper saw k = 19 at N = 40)",
                  bool(all(p["r_star"] >= 0.3 for p in per))),
        KeyNumber("held-out order-1 probe at the end", fmt(n["probe_end"]), "order-1 structure late", None),
    ]


def describe_mod(n: dict) -> str:
    """The paragraph of ``staircase-mod`` from :func:`measure_mod`."""
    first, early_mse = n["first"], n["early_mse"]
    return (
        f"Every token of `mod` has the same order-0 label signature, so the order-0 correlation is undefined and "
        f"1 − MSE is read instead: it reaches {fmt(early_mse)} during the plateau"
        + (", so the embeddings are nearly collinear and carry no token identity. " if early_mse >= COLLINEAR
           else ", so the embeddings do not become collinear. ")
        + f"Accuracy stays near chance until about epoch {first['plateau_end']}, "
        f"then the task is learned (≥ 95 % at epoch {first['learned']}). The late geometry is best matched by the "
        f"Fourier frequency k = {first['k_star']} (r = {fmt(first['r_star'])}), a ring over the tokens."
    )


def draw_mod(paths: dict[str, Path], n: dict) -> Figures:
    """The figures of ``staircase-mod``: early is the plateau's last snapshot."""
    return _figures(paths[""], max(n["first"]["early_epoch"], 1), n["first"]["last_epoch"])


register(TrainedRecipe(
    name="staircase-add", figure="SPEC §8 F3 (F1)",
    expectation="order-0 Pearson ≈ 1 early, then lower; held-out order-1 probe above it late; "
                "odd/even split late (k = N/2)",
    cpu_time="≈ 30 s",
    paper=Paper("ρ_(0) ≈ 1 early, then drops; the order-1 probe better later; Fourier: low k early, "
                "k = 20 late (F1: odd/even split)",
                f"F_add, N = 40, 1200 epochs, snapshots early and late; {SPEC8_SETTINGS}"),
    runs=lambda: {"": _config("staircase-add", "add", "relu", "gd", 2.0, 3000)},
    analyses=("alignment", "order_shares"),
    measure=measure_add, judge=judge_add, describe=describe_add, draw=draw_add, summary=members_summary,
))

register(TrainedRecipe(
    name="staircase-mod", figure="SPEC §8 F3",
    expectation="order 0 undefined, embeddings collinear (1 − MSE ≈ 1) on a chance-level plateau; then learned; "
                "ring at k = 19",
    cpu_time="≈ 6 s",
    paper=Paper("all φ^(y;0) equal: embeddings collinear and the task not learned early; a mod-19 ring "
                "late (1 → 20 → 39), task frequency k = 19",
                f"F_mod = (x1 + x2 + 1) mod N, N = 40, 1200 epochs, snapshots early and late; {SPEC8_SETTINGS}"),
    runs=lambda: {"": _config("staircase-mod", "mod", "tanh", "adam", 1e-2, 1000)},
    measure=measure_mod, judge=judge_mod, describe=describe_mod, draw=draw_mod, summary=members_summary,
))

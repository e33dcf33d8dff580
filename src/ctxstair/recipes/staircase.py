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
from ctxstair.analysis.order_shares import read_order_shares
from ctxstair.config import InitConfig, ModelConfig, RunConfig, TaskConfig, TrainConfig
from ctxstair.recipes.base import KeyNumber, Outcome, Recipe, register
from ctxstair.report import measures as ms
from ctxstair.report import run_figures


def _config(name: str, task: str, activation: str, optimizer: str, lr: float, epochs: int) -> RunConfig:
    return RunConfig(recipe=name, task=TaskConfig(task, {"N": 40}),
                     model=ModelConfig(d=128, activation=activation, init=InitConfig(gamma=1.0)),
                     train=TrainConfig(optimizer=optimizer, lr=lr, epochs=epochs))


def _figures(run: Path, early: int, late: int) -> dict:
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
    """The staircase numbers of one member of an ``add`` run: order-0 peak, probe, odd/even split."""
    table = rundir.read_alignment(run)
    epochs, r0 = rundir.alignment_series(table, "order0", m)
    _, probe = rundir.alignment_series(table, "order1_probe", m)
    _, probe0 = rundir.alignment_series(table, "order1_probe_zero_mean", m)
    ks, _ = ms.fourier_profile(run, m, int(epochs[-1]))
    _, half = rundir.alignment_series(table, f"fourier_k{ks.max()}", m)
    loss_epochs, loss = ms.metric_series(run, m, "loss")
    acc_epochs, acc = ms.metric_series(run, m, "acc")
    halfway = (loss[0] + loss[-1]) / 2
    before_halfway = np.array([ms.value_at(loss_epochs, loss, e) > halfway for e in epochs])
    peak = int(np.nanargmax(np.where(before_halfway, r0, -np.inf)))
    k_star, r_star = ms.best_frequency(*ms.fourier_profile(run, m, int(epochs[-1])))
    return dict(peak=float(r0[peak]), peak_epoch=int(epochs[peak]),
                peak_loss=ms.value_at(loss_epochs, loss, epochs[peak]),
                halfway=float(halfway), end=float(r0[-1]), probe_end=float(probe[-1]), probe0_end=float(probe0[-1]),
                acc_end=float(acc[-1]), acc_full=ms.first_epoch(acc_epochs, acc >= 1.0),
                k_half=int(ks.max()), half_at_peak=float(half[peak]), half_end=float(half[-1]),
                k_star=k_star, r_star=r_star, last_epoch=int(epochs[-1]))


def conclude_add(out: Path, paths: dict[str, Path]) -> Outcome:
    """The key numbers, paragraph and figures of ``staircase-add``, from its run directory."""
    run = paths[""]
    per = [member_add_numbers(run, m) for m in ms.members(run)]
    med = {key: ms.median([p[key] for p in per]) for key in per[0] if key not in ("acc_full",)}
    first = per[0]
    split_rise = med["half_end"] - med["half_at_peak"]
    keys = [
        KeyNumber("order-0 Pearson at its early peak",
                  f"{ms.fmt(med['peak'])} at epoch {first['peak_epoch']} (loss {ms.fmt(first['peak_loss'], 2)}; "
                  f"halfway {ms.fmt(first['halfway'], 2)})",
                  "≥ 0.95, before the loss has fallen halfway", bool(med["peak"] >= 0.95)),
        KeyNumber("order-0 Pearson at the end", f"{ms.fmt(med['end'])} (drop {ms.fmt(med['peak'] - med['end'])})",
                  "at least 0.05 below the early peak", bool(med["peak"] - med["end"] >= 0.05)),
        KeyNumber("held-out order-1 probe at the end", f"{ms.fmt(med['probe_end'])} vs order 0 {ms.fmt(med['end'])}",
                  "above the order-0 score", bool(med["probe_end"] > med["end"])),
        KeyNumber("zero-mean order-1 probe (v ⟂ 1) at the end", ms.fmt(med["probe0_end"]),
                  "high: order 1 beyond order 0 explains the late geometry", None),
        KeyNumber("training accuracy at the end",
                  f"{ms.fmt(med['acc_end'])} (100 % first at epoch {first['acc_full']})",
                  "100 %", bool(med["acc_end"] >= 1.0)),
        KeyNumber(f"odd/even split: alignment with order 1 via c_k, k = N/2 = {first['k_half']}",
                  f"{ms.fmt(med['half_at_peak'])} at the order-0 peak → {ms.fmt(med['half_end'])} at the end",
                  "rises by ≥ 0.1 as the task is learned (late odd/even split, SPEC §8 F1/F3)",
                  bool(split_rise >= 0.1)),
        KeyNumber("best Fourier frequency k ≥ 1 at the end", f"k = {first['k_star']} (r = {ms.fmt(first['r_star'])})",
                  "the paper saw k = 20 late at N = 40", None),
    ]
    shares_keys, shares_text = _order_share_numbers(run, first["peak_epoch"], first["last_epoch"])
    keys += shares_keys
    paragraph = (
        f"Trained from small initialization (γ = 1), the embeddings first line up with the order-0 label signature: "
        f"the order-0 Pearson correlation peaks at {ms.fmt(med['peak'])} around epoch {first['peak_epoch']}, while the "
        f"loss is still above halfway. As the task is learned (accuracy {ms.fmt(med['acc_end'])} at the end) the "
        f"order-0 alignment falls to {ms.fmt(med['end'])} and the held-out order-1 probe stays higher "
        f"({ms.fmt(med['probe_end'])}): order-1 structure takes over. The alignment through the k = N/2 (odd/even) "
        f"cosine probe goes from {ms.fmt(med['half_at_peak'])} to {ms.fmt(med['half_end'])}: "
        + ("an odd/even component forms late." if split_rise >= 0.1 else "no clear odd/even split forms.")
        + shares_text
    )
    figures = _figures(run, first["peak_epoch"], first["last_epoch"])
    if (run / "theory.csv").is_file():
        figures["order_shares.png"] = ("The staircase in gradient space: each order's share of the label-driven "
                                       "gradient and its cosine with the actual update.",
                                       run_figures.order_shares_figure(run))
    return Outcome(keys, paragraph, figures, {"members": per})


def _order_share_numbers(run: Path, early: int, late: int) -> tuple[list[KeyNumber], str]:
    """Key numbers of ``theory.csv`` (member 0): which order's term points along the actual update
    early (at the order-0 peak) and late, and whether order 1's share grows (SPEC §6.1)."""
    if not (run / "theory.csv").is_file():
        return [], ""
    table = read_order_shares(run)

    def at(epoch: int, order: int, column: str) -> float:
        rows = (table["member"] == 0) & (table["epoch"] == epoch) & (table["order"] == order)
        return float(table[column][rows][0])

    cos = {(e, m): at(e, m, "cosine_with_update") for e in (early, late) for m in (0, 1)}
    share_early, share_late = at(early, 1, "share"), at(late, 1, "share")
    keys = [
        KeyNumber(f"cosine of the order-0 / order-1 term with the actual update at epoch {early}",
                  f"{ms.fmt(cos[early, 0])} / {ms.fmt(cos[early, 1])}", "order 0 drives the embeddings first",
                  cos[early, 0] > cos[early, 1]),
        KeyNumber(f"cosine of the order-0 / order-1 term with the actual update at epoch {late}",
                  f"{ms.fmt(cos[late, 0])} / {ms.fmt(cos[late, 1])}", "order 1 drives them late",
                  cos[late, 1] > cos[late, 0]),
        KeyNumber("order-1 share of the label-driven gradient norm", f"{ms.fmt(share_early)} at epoch {early} → "
                  f"{ms.fmt(share_late)} at epoch {late} (decomposition residual ≤ "
                  f"{ms.fmt(float(table['relative_residual'].max()), 2)})", "grows later", share_late > share_early),
    ]
    text = (f" In gradient space the order-0 term points along the actual update early (cosine {ms.fmt(cos[early, 0])} "
            f"vs {ms.fmt(cos[early, 1])} for order 1 at epoch {early}) and the order-1 term late "
            f"({ms.fmt(cos[late, 1])} vs {ms.fmt(cos[late, 0])} at epoch {late}).")
    return keys, text


def member_mod_numbers(run: Path, m: int) -> dict:
    """The staircase numbers of one member of a ``mod`` run: collinear plateau, learning, ring."""
    table = rundir.read_alignment(run)
    epochs, _ = rundir.alignment_series(table, "order0", m)
    _, one_minus_mse = rundir.alignment_series(table, "order0", m, "one_minus_mse")
    defined = table["defined"][(table["signature"] == "order0") & (table["member"] == m)]
    _, probe = rundir.alignment_series(table, "order1_probe", m)
    acc_epochs, acc = ms.metric_series(run, m, "acc")
    chance = 1.0 / len(rundir.read_signatures(run).labels)
    plateau_end = ms.first_epoch(acc_epochs, acc > 2 * chance)
    learned = ms.first_epoch(acc_epochs, acc >= 0.95)
    in_plateau = epochs < (plateau_end if plateau_end is not None else epochs[-1] + 1)
    early_mse = float(np.nanmax(np.where(in_plateau, one_minus_mse, -np.inf))) if in_plateau.any() else float("nan")
    k_star, r_star = ms.best_frequency(*ms.fourier_profile(run, m, int(epochs[-1])))
    return dict(any_defined=bool(defined.any()), early_mse=early_mse, plateau_end=plateau_end, learned=learned,
                chance=chance, acc_end=float(acc[-1]), probe_end=float(probe[-1]), k_star=k_star, r_star=r_star,
                early_epoch=int(epochs[in_plateau][-1]) if in_plateau.any() else 0, last_epoch=int(epochs[-1]))


def conclude_mod(out: Path, paths: dict[str, Path]) -> Outcome:
    """The key numbers, paragraph and figures of ``staircase-mod``, from its run directory."""
    run = paths[""]
    per = [member_mod_numbers(run, m) for m in ms.members(run)]
    first = per[0]
    early_mse = ms.median([p["early_mse"] for p in per])
    plateau = [p["plateau_end"] for p in per]
    learned = [p["learned"] for p in per]
    all_learned = all(x is not None for x in learned)
    keys = [
        KeyNumber("order-0 alignment", "undefined at every snapshot" if not any(p["any_defined"] for p in per)
                  else "defined at some snapshot", "undefined (all order-0 signatures are equal)",
                  not any(p["any_defined"] for p in per)),
        KeyNumber("order-0 1 − MSE during the plateau (max)", ms.fmt(early_mse),
                  "≈ 1 (embeddings collinear early); met if ≥ 0.9", bool(early_mse >= 0.9)),
        KeyNumber("end of the plateau: first epoch with accuracy > 2 × chance",
                  f"epoch {first['plateau_end']} (chance = {ms.fmt(first['chance'])})",
                  "a long plateau near chance before learning", bool(all(p is not None and p >= 20 for p in plateau))),
        KeyNumber("first epoch with training accuracy ≥ 95 %", str(first["learned"]), "the task is learned",
                  all_learned),
        KeyNumber("best Fourier frequency k ≥ 1 at the end", f"k = {first['k_star']} (r = {ms.fmt(first['r_star'])})",
                  "a non-zero frequency with r ≥ 0.3 (the paper saw k = 19 at N = 40)",
                  bool(all(p["r_star"] >= 0.3 for p in per))),
        KeyNumber("held-out order-1 probe at the end", ms.fmt(ms.median([p["probe_end"] for p in per])),
                  "order-1 structure late", None),
    ]
    paragraph = (
        f"Every token of `mod` has the same order-0 label signature, so the order-0 correlation is undefined and "
        f"1 − MSE is read instead: it reaches {ms.fmt(early_mse)} during the plateau"
        + (", so the embeddings are nearly collinear and carry no token identity. " if early_mse >= 0.9
           else ", so the embeddings do not become collinear. ")
        + f"Accuracy stays near chance until about epoch {first['plateau_end']}, "
        f"then the task is learned (≥ 95 % at epoch {first['learned']}). The late geometry is best matched by the "
        f"Fourier frequency k = {first['k_star']} (r = {ms.fmt(first['r_star'])}), a ring over the tokens."
    )
    return Outcome(keys, paragraph, _figures(run, max(first["early_epoch"], 1), first["last_epoch"]), {"members": per})


register(Recipe(
    name="staircase-add", figure="SPEC §8 F3 (F1)",
    expectation="order-0 Pearson ≈ 1 early, then lower; held-out order-1 probe above it late; "
                "odd/even split late (k = N/2)",
    cpu_time="≈ 30 s",
    runs=lambda: {"": _config("staircase-add", "add", "relu", "gd", 2.0, 3000)},
    conclude=conclude_add,
    analyses=("alignment", "order_shares"),
))

register(Recipe(
    name="staircase-mod", figure="SPEC §8 F3",
    expectation="order 0 undefined, embeddings collinear (1 − MSE ≈ 1) on a chance-level plateau; then learned; "
                "ring at k = 19",
    cpu_time="≈ 6 s",
    runs=lambda: {"": _config("staircase-mod", "mod", "tanh", "adam", 1e-2, 1000)},
    conclude=conclude_mod,
))

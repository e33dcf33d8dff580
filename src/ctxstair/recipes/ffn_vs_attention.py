"""Structure is not a solution (SPEC §8 F8a): ``ffn-vs-attention``.

    ctxstair run ffn-vs-attention --out runs/ffn-vs-attention    # F8a, about 40 s on 2 CPU cores

Defaults, and why (docs/recipes.md has the measurements): ``mod`` (y = (x1 + x2 + 1) mod N), N = 40,
two parts trained identically — full-batch Adam lr 1e-2, γ = 1, 3000 epochs: ``cbow`` (the CBOW
model with tanh, as ``staircase-mod``: with ReLU the embeddings never become collinear and there is
no plateau to leave) and ``attention`` (the attention-only model of ``attention-arith``, d_k = 64).
Adam lr 1e-2 is the setting of both ``staircase-mod`` and ``attention-arith``. The paper trains 1000
epochs; at this optimiser the attention-only model is then still on its plateau (loss ln N, probe
−0.14) and leaves it between epochs 900 and 2100 depending on the seed, so the default is 3000
(``--set train.epochs=1000`` for the paper's length). Snapshots are dense up to epoch 200 (where
CBOW learns) and every 200 epochs after.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.analysis import measures as ms
from ctxstair.analysis.measures import LEARNED_ACC
from ctxstair.config import InitConfig, ModelConfig, RunConfig, SnapshotConfig, TaskConfig, TrainConfig
from ctxstair.recipes.base import Figures, KeyNumber, Paper, TrainedRecipe, register
from ctxstair.report import learning_figures
from ctxstair.report.formats import fmt, fmt_epochs

#: The learning threshold (:data:`ctxstair.analysis.measures.LEARNED_ACC`) as report text: "95 %".
LEARNED = f"{LEARNED_ACC * 100:g} %"
#: Held-out order-1 probe at which the embeddings count as aligned with order 1 (as attention-arith).
ALIGNED_PROBE = 0.5

FFN_PARTS = ("cbow", "attention")


def _ffn_config(kind: str) -> RunConfig:
    """The part ``kind``. The attention-only model does not learn mod and where its probe ends is
    decided by rounding (0.45 on one code path, 0.93 on another), so it trains over seeds."""
    model = (ModelConfig(kind="cbow", d=128, activation="tanh", init=InitConfig(gamma=1.0)) if kind == "cbow"
             else ModelConfig(kind="attention", d=128, d_k=64, init=InitConfig(gamma=1.0)))
    members = 1 if kind == "cbow" else ms.MIN_SEEDS
    return RunConfig(recipe="ffn-vs-attention", task=TaskConfig("mod", {"N": 40}), model=model,
                     train=TrainConfig(optimizer="adam", lr=1e-2, epochs=3000, members=members),
                     snapshots=SnapshotConfig(log_points=40, every=200))


def _ffn_member(run: Path, m: int) -> dict:
    """Accuracy, learning epoch and the order-1 probe of one member of one part."""
    table = rundir.read_alignment(run)
    epochs, probe = rundir.alignment_series(table, "order1_probe", m)
    _, probe0 = rundir.alignment_series(table, "order1_probe_zero_mean", m)
    acc_epochs, acc = ms.metric_series(run, m, "acc")
    learned = ms.learned_epoch(acc_epochs, acc)
    before = epochs < learned if learned is not None else np.zeros(len(epochs), bool)
    aligned = ms.first_epoch(epochs, probe >= ALIGNED_PROBE)
    return dict(**ms.collinear_phase_probe(table, m), final_accuracy=float(acc[-1]), best_accuracy=float(acc.max()),
                epoch_95=learned, probe_zero_mean_end=float(probe0[-1]), aligned_epoch=aligned,
                acc_at_aligned=float("nan") if aligned is None else ms.value_at(acc_epochs, acc, aligned),
                probe_before_learned=float(probe[before][-1]) if before.any() else float("nan"),
                snapshot_before_learned=int(epochs[before][-1]) if before.any() else None,
                curves={"acc": (acc_epochs, acc), "probe": (epochs, probe)})


def measure_ffn(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of ``ffn-vs-attention``: per member of each part (``per``, :func:`_ffn_member`), the
    medians of final accuracy and probe per part (``med``), chance, the task tokens, whether every CBOW
    member learned and was aligned before it did, the attention probe's rise over the seeds
    (:func:`~ctxstair.analysis.measures.probe_rise`) and the attention model's median best accuracy."""
    per = {part: [_ffn_member(paths[part], m) for m in ms.members(paths[part])] for part in FFN_PARTS}
    cbow_learned = all(p["epoch_95"] is not None for p in per["cbow"])
    att_rise, att_noise, att_rises = ms.probe_rise(per["attention"])
    return dict(per=per, med={part: ms.medians(per[part], ("final_accuracy", "probe_end")) for part in FFN_PARTS},
                chance=ms.chance_accuracy(paths["cbow"]), tokens=rundir.read_signatures(paths["cbow"]).tokens,
                cbow_learned=cbow_learned,
                aligned_first=cbow_learned and all(p["probe_before_learned"] >= ALIGNED_PROBE for p in per["cbow"]),
                att_rise=att_rise, att_noise=att_noise, att_rises=att_rises,
                att_best=ms.median([p["best_accuracy"] for p in per["attention"]]),
                seeds={part: ms.member_seeds(paths[part]) for part in FFN_PARTS})


def judge_ffn(n: dict) -> list[KeyNumber]:
    """The key numbers of ``ffn-vs-attention`` from :func:`measure_ffn`."""
    per, med, chance = n["per"], n["med"], n["chance"]
    cbow, att = per["cbow"], per["attention"]
    return [
        KeyNumber("CBOW: training accuracy at the end",
                  f"{fmt(med['cbow']['final_accuracy'])} (chance {fmt(chance)})",
                  f"learned: ≥ {LEARNED}", bool(med["cbow"]["final_accuracy"] >= LEARNED_ACC)),
        KeyNumber(f"attention-only: training accuracy at the end (median over {len(att)} seed(s))",
                  f"{fmt(med['attention']['final_accuracy'])} (chance {fmt(chance)}; best per seed "
                  f"{', '.join(fmt(p['best_accuracy']) for p in att)})",
                  f"fails: the median seed stays below {LEARNED} at every epoch",
                  bool(n["att_best"] < LEARNED_ACC)),
        KeyNumber(f"first epoch with training accuracy ≥ {LEARNED} (CBOW / attention-only)",
                  f"{fmt_epochs([p['epoch_95'] for p in cbow])} / {fmt_epochs([p['epoch_95'] for p in att])}",
                  "CBOW within the budget; attention-only never", None),
        KeyNumber("CBOW: held-out order-1 probe at the end", fmt(med["cbow"]["probe_end"]),
                  f"aligned with order 1: ≥ {ALIGNED_PROBE}", bool(med["cbow"]["probe_end"] >= ALIGNED_PROBE)),
        KeyNumber(f"attention-only: held-out order-1 probe, collinear phase → end (median over {len(att)} seed(s))",
                  f"{fmt(ms.median([p['probe_collinear'] for p in att]))} → {fmt(med['attention']['probe_end'])} "
                  f"(per seed at the end: {', '.join(fmt(p['probe_end']) for p in att)}; median rise "
                  f"{fmt(n['att_rise'])}, seed-to-seed spread of the probe in the collinear phase "
                  f"{fmt(n['att_noise'])})",
                  f"aligns with order 1: the median rise exceeds the collinear-phase spread, over ≥ {ms.MIN_SEEDS} "
                  f"seeds; whether it ends ≥ {ALIGNED_PROBE} is not judged (it depends on when each seed leaves "
                  "the plateau)", n["att_rises"]),
        KeyNumber(f"CBOW: held-out order-1 probe at the last snapshot before accuracy reached {LEARNED}",
                  ", ".join(f"never reached {LEARNED}" if p["epoch_95"] is None else
                            f"{fmt(p['probe_before_learned'])} at epoch {p['snapshot_before_learned']} "
                            f"({LEARNED} at {p['epoch_95']})" for p in cbow),
                  f"aligned before learned: ≥ {ALIGNED_PROBE}", n["aligned_first"]),
        KeyNumber(f"first snapshot with the order-1 probe ≥ {ALIGNED_PROBE}, and the accuracy then "
                  "(CBOW / attention-only)",
                  " / ".join(", ".join("never" if p["aligned_epoch"] is None else
                                       f"{p['aligned_epoch']} ({fmt(p['acc_at_aligned'])})" for p in per[part])
                             for part in FFN_PARTS),
                  "both align; only CBOW then learns", None),
    ]


def describe_ffn(n: dict) -> str:
    """The paragraph of ``ffn-vs-attention`` from :func:`measure_ffn`."""
    med, first_c, first_a = n["med"], n["per"]["cbow"][0], n["per"]["attention"][0]
    att_aligned = bool(n["att_rises"])
    return (
        f"Both models are trained on mod (N = {len(n['tokens'])}) with the same optimiser. The CBOW model ends at "
        f"accuracy {fmt(med['cbow']['final_accuracy'])} (member 0: ≥ {LEARNED} from epoch "
        f"{fmt_epochs([first_c['epoch_95']])})"
        + (f", and its held-out order-1 probe was already {fmt(first_c['probe_before_learned'])} at the last "
           f"snapshot before that (epoch {first_c['snapshot_before_learned']})"
           if first_c["epoch_95"] is not None else "")
        + ". The attention-only model "
        + ("aligns with order 1 as well" if att_aligned else "does not align with order 1")
        + f" (probe {fmt(med['attention']['probe_end'])} at the end, median over {len(n['per']['attention'])} "
        f"seeds; member 0 ≥ {ALIGNED_PROBE} first at epoch "
        f"{fmt_epochs([first_a['aligned_epoch']])}) and ends at accuracy "
        f"{fmt(med['attention']['final_accuracy'])} (chance {fmt(n['chance'])})"
        + (": signature structure is not a solution." if att_aligned and n["att_best"] < LEARNED_ACC else ".")
    )


def ffn_rows(n: dict) -> list[dict]:
    """``summary.csv`` of ``ffn-vs-attention``: one row per (model, member)."""
    return [dict(model=part, member=m, seed=seed, final_accuracy=p["final_accuracy"], epoch_95=p["epoch_95"],
                 probe_collinear=p["probe_collinear"], probe_end=p["probe_end"],
                 probe_zero_mean_end=p["probe_zero_mean_end"],
                 aligned_epoch=p["aligned_epoch"])
            for part in FFN_PARTS for m, (seed, p) in enumerate(zip(n["seeds"][part], n["per"][part]))]


def summarise_ffn(n: dict) -> dict:
    """``summary.json`` of ``ffn-vs-attention``: chance and every member's numbers but its curves."""
    return {"chance": n["chance"], **{part: [{k: v for k, v in p.items() if k != "curves"} for p in n["per"][part]]
                                      for part in FFN_PARTS}}


def draw_ffn(paths: dict[str, Path], n: dict) -> Figures:
    """The figures of ``ffn-vs-attention``: accuracy and probe curves, and member 0's final embeddings."""
    per, tokens = n["per"], n["tokens"]
    cbow, att = per["cbow"], per["attention"]
    panels = []
    for part, label in (("cbow", "CBOW (tanh)"), ("attention", "attention-only")):
        last = rundir.snapshot_times(paths[part])[-1]
        W = rundir.load_snapshot(paths[part], last)["W_E"][0][tokens].astype(np.float64)
        p = per[part][0]
        panels.append((f"{label}, epoch {last}\naccuracy {fmt(p['final_accuracy'])}, order-1 probe "
                       f"{fmt(p['probe_end'])}", W))
    return {
        "learning.png": ("Training accuracy (top) and the held-out order-1 probe (bottom) of the CBOW and the "
                         "attention-only model over training.",
                         learning_figures.accuracy_and_probe_figure(
                             {"CBOW": [p["curves"] for p in cbow], "attention-only": [p["curves"] for p in att]},
                             n["chance"], LEARNED_ACC)),
        "pca.png": ("Final embeddings of the task tokens of both models (member 0) on their first two principal "
                    "components.", learning_figures.pca_panels_figure(
                        panels, tokens, "Final embeddings on their first two principal components (member 0)")),
    }


register(TrainedRecipe(
    name="ffn-vs-attention", figure="SPEC §8 F8a",
    expectation="mod, N = 40: CBOW learns once aligned with order 1; attention-only aligns with order 1 but fails",
    cpu_time="≈ 40 s",
    paper=Paper("structure ≠ solution: CBOW learns once aligned with order 1; attention-only aligns but fails",
                "F_mod, L = 2, N = 40, 1000 epochs, CBOW vs attention-only; d = 128, small init, full dataset"),
    runs=lambda: {part: _ffn_config(part) for part in FFN_PARTS},
    measure=measure_ffn, judge=judge_ffn, describe=describe_ffn, draw=draw_ffn, summary=summarise_ffn,
    member_rows=ffn_rows,
))


"""Small initialization composes (SPEC §9, anchor functions): ``composite``.

    ctxstair run composite --out runs/composite            # about 3 min on 2 CPU cores

One part per γ, the seeds as members, the snapshots read back (:mod:`ctxstair.recipes.anchor_lineage`).
Defaults, and why (docs/recipes.md has the measurements): key ``x``, anchors ``a1, a2`` with shifts
1: +5, 2: +1, 3: −2, 4: −8, pair (3, 4) → ``x − 6``, pair (4, 3) held out; on the held-out pair the
*inferential* answer composes the shifts (``x − 10``) and the *symmetric* one repeats the (3, 4)
rule (``x − 6``). Model: the attention-only model with learned positions (d = 128, d_k = 64),
because the CBOW model sums its input embeddings: (x, 4, 3) and (x, 3, 4) are the same input to it,
so it gives the symmetric answer by construction, whatever γ. The one-layer attention model predicts
from the last position through one softmax over positions and cannot find a key that is marked only
by its place before the anchors among noise tokens of the key range, so the sequences are
``(x, a1, a2)`` with no noise (``task.seq_len = 3``), and the residue rule is off
(``task.residue_modulus = 0``: with one key position it would hold out whole keys, whose embeddings
are then never trained). 2,000 training samples drawn from the 80 × 15 sequences, full-batch Adam
lr 1e-3 (at lr 2e-3 γ = 0.8 spikes and falls back), 2000 epochs, γ ∈ {0.3, 0.5, 0.8}. Expected
(SPEC §9; the anchor-function work, arXiv 2405.05409): small initialization (large γ) → inferential.

Measures (all read from the run directories): *inferential / symmetric fraction*: fraction of the
held-out samples (``meta["eval"]["heldout_pair"]``) whose argmax is ``y_inferential`` /
``y_symmetric``; the order of the keys along PC1
(:func:`~ctxstair.recipes.anchor_lineage.order_along_pc1`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.analysis import measures as ms
from ctxstair.config import InitConfig, ModelConfig, RunConfig, TaskConfig
from ctxstair.recipes.anchor_lineage import (
    MAJORITY,
    gamma_of,
    gammas_text,
    lineage_config,
    logits,
    order_along_pc1,
    part_name,
    snapshot_model,
    values_text,
)
from ctxstair.recipes.base import Figures, KeyNumber, Paper, TrainedRecipe, register
from ctxstair.report import lineage_figures
from ctxstair.report.formats import fmt

COMPOSITE_GAMMAS = (0.3, 0.5, 0.8)
#: Every member must fit at least this fraction of its training samples for its held-out answer to count.
FITTED_ACC = 0.9


def _answer(offset: int) -> str:
    """An answer as an offset from the key: 'x − 10', 'x + 6'."""
    return f"x {'−' if offset < 0 else '+'} {abs(offset)}"


def _composite_config(gamma: float) -> RunConfig:
    task = TaskConfig("composite", {"seq_len": 3, "residue_modulus": 0, "n_samples": 2000})
    model = ModelConfig(kind="attention", d=128, d_k=64, positional=True, init=InitConfig(gamma=gamma))
    return lineage_config("composite", task, model, epochs=2000, every=200)


def composite_part(run: Path) -> dict:
    """Held-out answers over training, fit and key geometry of one γ part of ``composite``.

    Returns ``gamma``, ``seeds``, ``epochs`` (snapshot epochs), ``inferential`` and ``symmetric``
    (per member, the fraction of held-out samples at each snapshot), ``acc_curves`` (per member,
    epochs and training accuracy from ``metrics.jsonl``), per member at the last snapshot
    ``inferential_end``, ``symmetric_end``, ``other_end``, the most common other answer as an
    offset from the key (``other_offset``, ``other_offset_fraction`` of the held-out samples),
    ``train_acc`` (last epoch), ``key_order`` and ``key_pc1_variance`` (order of the key embeddings
    along PC1, variance PC1 explains); the answers' offsets ``inferential_offset`` (−10) and
    ``symmetric_offset`` (−6); ``keys`` / ``key_rows`` (member 0's key embeddings at the end).
    """
    epochs = rundir.snapshot_times(run)
    inferential, symmetric = [], []
    for epoch in epochs:
        dataset, model = snapshot_model(run, epoch)
        held = dataset.meta["eval"]["heldout_pair"]
        pred = logits(model, held["X"]).argmax(dim=-1).numpy()  # (K, n_eval)
        inferential.append((pred == held["y_inferential"]).mean(axis=1))
        symmetric.append((pred == held["y_symmetric"]).mean(axis=1))
    inferential, symmetric = np.array(inferential).T, np.array(symmetric).T  # (K, snapshots)
    # the answers of the last snapshot that are neither, as offsets from the key
    other = (pred != held["y_inferential"]) & (pred != held["y_symmetric"])
    key = held["X"][np.arange(len(held["X"])), held["key_position"]]
    other_offset, other_fraction = [], []
    for k in range(pred.shape[0]):
        values, counts = np.unique(pred[k][other[k]] - key[other[k]], return_counts=True)
        other_offset.append(int(values[counts.argmax()]) if values.size else None)
        other_fraction.append(float(counts.max() / pred.shape[1]) if values.size else 0.0)
    keys = dataset.meta["groups"]["keys"]
    W = rundir.load_snapshot(run, epochs[-1])["W_E"].astype(np.float64)
    members = ms.members(run)
    pc1 = [order_along_pc1(W[m][keys], keys) for m in members]
    acc_curves = [ms.metric_series(run, m, "acc") for m in members]
    return dict(
        gamma=gamma_of(run), seeds=ms.member_seeds(run), epochs=epochs,
        inferential=inferential.tolist(), symmetric=symmetric.tolist(),
        inferential_end=inferential[:, -1].tolist(), symmetric_end=symmetric[:, -1].tolist(),
        other_end=other.mean(axis=1).tolist(),
        other_offset=other_offset, other_offset_fraction=other_fraction,
        inferential_offset=int(held["y_inferential"][0] - key[0]),
        symmetric_offset=int(held["y_symmetric"][0] - key[0]),
        acc_curves=acc_curves, train_acc=[float(acc[-1]) for _, acc in acc_curves],
        key_order=[o for o, _ in pc1], key_pc1_variance=[v for _, v in pc1],
        keys=keys.tolist(), key_rows=W[0][keys],
    )


def measure_composite(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of ``composite``: the parts (:func:`composite_part`) by ascending γ, the median
    inferential fraction at the smallest and largest γ (``inf_lo``, ``inf_hi``), whether every seed
    fitted its training set, and the two answers' offsets from the key."""
    parts = sorted((composite_part(run) for run in paths.values()), key=lambda p: p["gamma"])
    lo, hi = parts[0], parts[-1]
    return dict(parts=parts, lo=lo, hi=hi, inf_lo=ms.median(lo["inferential_end"]),
                inf_hi=ms.median(hi["inferential_end"]),
                fitted=all(min(p["train_acc"]) >= FITTED_ACC for p in parts),
                inf_off=hi["inferential_offset"], sym_off=hi["symmetric_offset"])


def judge_composite(n: dict) -> list[KeyNumber]:
    """The key numbers of ``composite`` from :func:`measure_composite`."""
    parts, lo, hi, inf_lo, inf_hi = n["parts"], n["lo"], n["hi"], n["inf_lo"], n["inf_hi"]
    keys = [
        KeyNumber(f"inferential answer ({_answer(n['inf_off'])}) on the held-out pair: γ = {lo['gamma']:g} → "
                  f"γ = {hi['gamma']:g}",
                  f"{fmt(inf_lo)} → {fmt(inf_hi)} of the held-out samples (median over seeds)",
                  f"small init → inferential: the majority answer (≥ {MAJORITY:g}) at the largest γ, not at the "
                  f"smallest", bool(inf_hi >= MAJORITY > inf_lo)),
    ]
    for p in parts:
        other = ", ".join(f"{_answer(o)} ({fmt(f)})" if o is not None else "none"
                          for o, f in zip(p["other_offset"], p["other_offset_fraction"]))
        keys.append(KeyNumber(
            f"γ = {p['gamma']:g}: held-out answers, inferential / symmetric ({_answer(n['sym_off'])}) / other",
            f"{values_text(p['inferential_end'])} / {values_text(p['symmetric_end'])} / {values_text(p['other_end'])}; "
            f"most common other answer per seed: {other}",
            "inferential at small init (large γ)", None))
    return keys + [
        KeyNumber("training accuracy at the end, per γ",
                  "; ".join(f"γ = {p['gamma']:g}: {values_text(p['train_acc'], 3)}" for p in parts),
                  f"every seed fits its training set (≥ {FITTED_ACC:g}), so that its held-out answer means something",
                  n["fitted"]),
        KeyNumber("symmetric answer at large init",
                  f"{values_text(lo['symmetric_end'])} at γ = {lo['gamma']:g}",
                  "the predecessor work's large-init answer; not asserted (SPEC §9 names the small-init side)", None),
        KeyNumber("keys ordered along PC1 of their embeddings (|Spearman| with the key value), per γ",
                  "; ".join(f"γ = {p['gamma']:g}: {values_text(p['key_order'])} (PC1 explains "
                            f"{values_text(p['key_pc1_variance'])} of the variance)" for p in parts),
                  "not asserted (SPEC §9 asks for the keys' PCA)", None),
    ]


def describe_composite(n: dict) -> str:
    """The paragraph of ``composite`` from :func:`measure_composite`."""
    parts, lo, hi, inf_lo, inf_hi = n["parts"], n["lo"], n["hi"], n["inf_lo"], n["inf_hi"]
    return (
        "The attention-only model (learned positions; the CBOW model would see (x, 4, 3) and (x, 3, 4) as one "
        f"input) was trained on the composite task at γ ∈ {{{gammas_text(parts, ', ')}}} and asked for the held-out "
        f"pair (4, 3). The fraction of held-out samples given the inferential answer {_answer(n['inf_off'])} goes "
        f"from {fmt(inf_lo)} at γ = {lo['gamma']:g} to {fmt(inf_hi)} at γ = {hi['gamma']:g}: "
        + ("small initialization composes the shifts, large initialization does not"
           if inf_hi >= MAJORITY > inf_lo else "the expected switch to the inferential answer at small initialization "
           "does not appear")
        + f". The symmetric answer {_answer(n['sym_off'])} gets at most "
        f"{fmt(max(ms.median(p['symmetric_end']) for p in parts))} of the held-out samples (median over seeds; "
        f"{fmt(max(max(p['symmetric_end']) for p in parts))} for the most symmetric seed) at any γ"
        + (": at large initialization the models answer neither way." if inf_lo < MAJORITY else ".")
        + f" Training accuracy at the end is {fmt(min(min(p['train_acc']) for p in parts))} or more"
        + ("." if n["fitted"] else f", below {FITTED_ACC:g} for some seed: their held-out answers are those of a "
           "model that has not fitted its training set.")
    )


def draw_composite(paths: dict[str, Path], n: dict) -> Figures:
    """The held-out answers per γ, the training curves and the keys' PCA."""
    parts = n["parts"]
    return {
        "answers.png": ("Held-out pair (4, 3): fraction of samples given the inferential and the symmetric answer, "
                        "per γ at the end of training (bars: median over seeds; dots: seeds).",
                        lineage_figures.answers_figure(parts, _answer(n["inf_off"]), _answer(n["sym_off"]))),
        "training.png": ("Training accuracy (top) and the inferential fraction on the held-out pair (bottom) over "
                         "training, one colour per γ, one line per seed.",
                         lineage_figures.composite_training_figure(parts)),
        "keys_pca.png": ("PCA of the key embeddings at the end of training, one panel per γ (seed of member 0); "
                         "colour runs with the key value.", lineage_figures.key_pca_figure(parts)),
    }


def composite_rows(n: dict) -> list[dict]:
    """``summary.csv`` of ``composite``: one row per (γ, seed)."""
    return [{"gamma": p["gamma"], "seed": s, "inferential_fraction": i, "symmetric_fraction": y,
             "other_fraction": o, "train_accuracy": a, "key_pc1_spearman": k}
            for p in n["parts"] for s, i, y, o, a, k in zip(p["seeds"], p["inferential_end"], p["symmetric_end"],
                                                            p["other_end"], p["train_acc"], p["key_order"])]


def summarise_composite(n: dict) -> dict:
    """``summary.json`` of ``composite``: every part but its arrays, and the thresholds."""
    return {"parts": [{k: v for k, v in p.items() if k not in ("key_rows", "acc_curves")} for p in n["parts"]],
            "majority": MAJORITY, "fitted_acc": FITTED_ACC}


register(TrainedRecipe(
    name="composite", figure="SPEC §9 anchor functions (composite task)",
    expectation="held-out pair (4, 3): small initialization (large γ) → inferential answer x − 10, not the "
                "symmetric x − 6",
    cpu_time="≈ 3 min",
    paper=Paper("not a paper figure (SPEC §9 lineage benchmark, anchor functions): small init gives the "
                "inferential answer x − 10 on the held-out pair (4, 3), not the symmetric x − 6",
                "keys 20..99, key x at position p, anchors a1, a2 at p+1, p+2, rest noise, length 9; shifts "
                "1:+5, 2:+1, 3:−2, 4:−8; y = x + s(a1) + s(a2), pair (3, 4) → x − 6; pair (4, 3) and a residue "
                "rule's (key, position) held out"),
    runs=lambda: {part_name(g): _composite_config(g) for g in COMPOSITE_GAMMAS},
    measure=measure_composite, judge=judge_composite, describe=describe_composite, draw=draw_composite,
    summary=summarise_composite, member_rows=composite_rows,
))


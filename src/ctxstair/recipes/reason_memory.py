"""Small initialization favours reasoning over memory (SPEC §9, arXiv 2502.04375): ``reason-memory``.

    ctxstair run reason-memory --out runs/reason-memory    # about 3 min on 2 CPU cores

One part per γ, the seeds as members, the snapshots read back (:mod:`ctxstair.recipes.anchor_lineage`).
Defaults, and why (docs/recipes.md has the measurements): keys 21..120, memory anchors 1..10,
reasoning anchors 11..20, q = 2, held-out reasoning pairs (11, 13), (13, 11). Model: the CBOW model
(ReLU, d = 128), the controlled model and the family of the paper's Emb-MLP. A CBOW model cannot find
the key among noise tokens of the key range (no more than the attention model of ``composite``), so
``task.seq_len = q + 1 = 3`` (key, a1, a2). It cannot tell (m1, m2) from (m2, m1) either, so memory
samples whose key saw both orders with different labels cap its memory accuracy; the report gives
that ceiling (:func:`order_blind_ceiling`). 4,000 training samples, full-batch Adam lr 1e-3
(SPEC §11), 800 epochs (the memory loss halves by epoch ≈ 600), γ ∈ {0.3, 0.5, 1.0}: large,
standard (0.5) and small initialization (1.0, the γ of SPEC §11). Expected (SPEC §9): small
initialization favours the reasoning anchors; their embeddings ordered, the memory anchors' alike.

Measures (all read from the run directories): *loss per group*: mean cross-entropy over the training
samples of each kind (``meta["is_reasoning"]``) at every snapshot; *halving epoch*: first snapshot
epoch at which it is at most half its value at epoch 0. *Order along PC1* of the reasoning anchors
(:func:`~ctxstair.recipes.anchor_lineage.order_along_pc1`). *Mean cosine within a group*: mean
pairwise cosine of the group's embedding rows (≈ 0 for random rows).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ctxstair import rundir
from ctxstair.alignment import mean_cosine
from ctxstair.analysis import measures as ms
from ctxstair.config import InitConfig, ModelConfig, RunConfig, TaskConfig
from ctxstair.models import Ensemble
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
from ctxstair.report.formats import fmt, fmt_epochs

REASON_GAMMAS = (0.3, 0.5, 1.0)
#: "Ordered": |Spearman| of the reasoning anchors' PC1 coordinates with their values at least this.
ORDERED = 0.9


def sample_losses(model: Ensemble, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Cross-entropy (K, n) of every member on every sample (X (n, L), y (n,))."""
    out = logits(model, X)
    K, n, V = out.shape
    target = torch.from_numpy(y).repeat(K)
    return torch.nn.functional.cross_entropy(out.reshape(K * n, V), target, reduction="none").view(K, n).numpy()


def halving_epoch(epochs: np.ndarray, loss: np.ndarray) -> int | None:
    """First epoch at which ``loss`` is at most half its value at the first epoch (None if never)."""
    return ms.first_epoch(epochs, loss <= loss[0] / 2)


def order_blind_ceiling(X: np.ndarray, y: np.ndarray) -> float:
    """Best training accuracy of any model that sees only the multiset of a sequence's tokens (CBOW):
    per multiset, the count of its most frequent label, summed, over the number of samples."""
    keys = np.sort(X, axis=1)
    _, group = np.unique(keys, axis=0, return_inverse=True)
    pairs, counts = np.unique(np.stack([group.ravel(), y]), axis=1, return_counts=True)
    best = np.zeros(int(group.max()) + 1, dtype=np.int64)
    np.maximum.at(best, pairs[0], counts)
    return float(best.sum() / len(y))


def _reason_config(gamma: float) -> RunConfig:
    task = TaskConfig("reason_memory", {"seq_len": 3, "n_samples": 4000})
    model = ModelConfig(kind="cbow", d=128, activation="relu", init=InitConfig(gamma=gamma))
    return lineage_config("reason-memory", task, model, epochs=800, every=25)


def _anchor_measures(W: np.ndarray, reasoning: np.ndarray, memory: np.ndarray) -> dict:
    """Order of the reasoning anchors along PC1 and the mean cosine within each anchor group."""
    return dict(order=order_along_pc1(W[reasoning], reasoning)[0], cos_reasoning=mean_cosine(W[reasoning]),
                cos_memory=mean_cosine(W[memory]))


def reason_part(run: Path) -> dict:
    """Loss per group over training, held-out accuracy and anchor geometry of one γ part of
    ``reason-memory``.

    Returns ``gamma``, ``seeds``, ``epochs`` (snapshot epochs); per member: ``loss_reasoning`` and
    ``loss_memory`` (mean training loss of each kind of sample at every snapshot), ``heldout`` (accuracy
    on the held-out reasoning pairs at every snapshot), ``half_reasoning`` / ``half_memory`` (halving
    epochs), ``max_gap`` / ``max_gap_epoch`` (largest memory-minus-reasoning loss and its epoch), at
    the end ``acc_reasoning``, ``acc_memory``, ``heldout_end``, ``heldout_error`` (median
    |answer − label| on the held-out samples), and the anchor measures (``order``,
    ``cos_reasoning``, ``cos_memory``) at the end (``*_end``) and at the reasoning halving epoch
    (``*_half``); ``ceiling_memory``: :func:`order_blind_ceiling` of the memory samples; ``anchors``,
    ``anchor_rows`` (member 0's anchor embeddings at the end) and the group ids for the figures.
    """
    epochs = np.array(rundir.snapshot_times(run))
    loss_r, loss_m, heldout = [], [], []
    for epoch in epochs:
        dataset, model = snapshot_model(run, int(epoch))
        is_r = dataset.meta["is_reasoning"]
        held = dataset.meta["eval"]["heldout_reasoning"]
        losses = sample_losses(model, dataset.X, dataset.y)
        loss_r.append(losses[:, is_r].mean(axis=1))
        loss_m.append(losses[:, ~is_r].mean(axis=1))
        heldout.append((logits(model, held["X"]).argmax(dim=-1).numpy() == held["y"]).mean(axis=1))
    loss_r, loss_m, heldout = np.array(loss_r).T, np.array(loss_m).T, np.array(heldout).T  # (K, snapshots)
    pred = logits(model, dataset.X).argmax(dim=-1).numpy()  # last snapshot
    held_pred = logits(model, held["X"]).argmax(dim=-1).numpy()
    groups = dataset.meta["groups"]
    reasoning, memory = groups["reasoning_anchors"], groups["memory_anchors"]
    members = range(loss_r.shape[0])
    half_r = [halving_epoch(epochs, loss_r[m]) for m in members]
    half_m = [halving_epoch(epochs, loss_m[m]) for m in members]
    gap = loss_m - loss_r
    W_end = rundir.load_snapshot(run, int(epochs[-1]))["W_E"].astype(np.float64)
    end = [_anchor_measures(W_end[m], reasoning, memory) for m in members]
    at_half = []
    for m in members:
        epoch = half_r[m] if half_r[m] is not None else int(epochs[-1])
        W = rundir.load_snapshot(run, epoch)["W_E"][m].astype(np.float64)
        at_half.append(_anchor_measures(W, reasoning, memory))
    anchors = np.concatenate([memory, reasoning])
    return dict(
        gamma=gamma_of(run), seeds=ms.member_seeds(run), epochs=epochs.tolist(),
        loss_reasoning=loss_r.tolist(), loss_memory=loss_m.tolist(), heldout=heldout.tolist(),
        half_reasoning=half_r, half_memory=half_m,
        max_gap=gap.max(axis=1).tolist(), max_gap_epoch=epochs[gap.argmax(axis=1)].tolist(),
        acc_reasoning=(pred[:, is_r] == dataset.y[is_r]).mean(axis=1).tolist(),
        acc_memory=(pred[:, ~is_r] == dataset.y[~is_r]).mean(axis=1).tolist(),
        heldout_end=heldout[:, -1].tolist(),
        heldout_error=np.median(np.abs(held_pred - held["y"]), axis=1).tolist(),
        ceiling_memory=order_blind_ceiling(dataset.X[~is_r], dataset.y[~is_r]),
        order_end=[e["order"] for e in end], cos_reasoning_end=[e["cos_reasoning"] for e in end],
        cos_memory_end=[e["cos_memory"] for e in end], order_half=[h["order"] for h in at_half],
        cos_reasoning_half=[h["cos_reasoning"] for h in at_half], cos_memory_half=[h["cos_memory"] for h in at_half],
        anchors=anchors.tolist(), reasoning=reasoning.tolist(), memory=memory.tolist(), anchor_rows=W_end[0][anchors],
    )


def _lead(p: dict) -> float:
    """Median over members of (memory halving epoch) / (reasoning halving epoch); inf if memory never halves."""
    ratios = [np.inf if m is None else m / r for r, m in zip(p["half_reasoning"], p["half_memory"]) if r]
    return float(np.median(ratios)) if ratios else float("nan")


def _pair(a: list[float], b: list[float]) -> str:
    """'0.94 / 0.90': the medians over members of two measures."""
    return f"{fmt(ms.median(a), 2)} / {fmt(ms.median(b), 2)}"


def _reasoning_first(p: dict) -> bool:
    """Whether the reasoning loss halves strictly before the memory loss for every member."""
    return all(r is not None and (m is None or r < m) for r, m in zip(p["half_reasoning"], p["half_memory"]))


def measure_reason(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of ``reason-memory``: the parts (:func:`reason_part`) by ascending γ, at the largest
    γ the median held-out accuracy and order along PC1, the median memory-anchor cosine per γ
    (``cos_m``), whether the reasoning loss halves first (at the largest γ, at every γ), the lead per γ
    (:func:`_lead`) and whether it grows with γ (``monotone``)."""
    parts = sorted((reason_part(run) for run in paths.values()), key=lambda p: p["gamma"])
    hi = parts[-1]
    leads = [_lead(p) for p in parts]
    return dict(parts=parts, lo=parts[0], hi=hi, held_hi=ms.median(hi["heldout_end"]),
                order_hi=ms.median(hi["order_end"]), cos_m={p["gamma"]: ms.median(p["cos_memory_end"]) for p in parts},
                first_hi=_reasoning_first(hi), all_first=all(_reasoning_first(p) for p in parts), leads=leads,
                monotone=all(a < b for a, b in zip(leads, leads[1:])))


def judge_reason(n: dict) -> list[KeyNumber]:
    """The key numbers of ``reason-memory`` from :func:`measure_reason`."""
    parts, lo, hi, leads, cos_m = n["parts"], n["lo"], n["hi"], n["leads"], n["cos_m"]
    keys = [
        KeyNumber(f"small init favours reasoning: reasoning loss halves first at γ = {hi['gamma']:g}, with a larger "
                  f"lead (memory / reasoning halving epoch) than at γ = {lo['gamma']:g}",
                  f"lead {' → '.join(fmt(v, 2) for v in leads)} at γ = {gammas_text(parts)}"
                  + ("" if n["all_first"] else "; the memory loss halves first (or together) for some seed"),
                  f"reasoning first at γ = {hi['gamma']:g}; lead larger at γ = {hi['gamma']:g} than at "
                  f"γ = {lo['gamma']:g}",
                  bool(n["first_hi"] and leads[-1] > leads[0])),
    ]
    for p in parts:
        keys.append(KeyNumber(
            f"γ = {p['gamma']:g}: epoch at which the training loss has halved, reasoning / memory samples",
            f"{fmt_epochs(p['half_reasoning'])} / {fmt_epochs(p['half_memory'])} (lead "
            f"{fmt(_lead(p), 2)}); largest memory − reasoning loss {values_text(p['max_gap'])} nats at epoch "
            f"{fmt_epochs(p['max_gap_epoch'])}; "
            "accuracy at the end "
            f"{values_text(p['acc_reasoning'])} / {values_text(p['acc_memory'])} (order-blind ceiling for memory "
            f"{fmt(p['ceiling_memory'])})", "reasoning first at small init", None))
    return keys + [
        KeyNumber(f"accuracy on the held-out reasoning pairs (11, 13), (13, 11) at the end, γ = "
                  f"{gammas_text(parts)}",
                  " → ".join(values_text(p["heldout_end"]) for p in parts)
                  + f"; median |answer − label| {' → '.join(values_text(p['heldout_error'], 1) for p in parts)}",
                  f"small init generalises to the held-out pairs: ≥ {MAJORITY:g} at γ = {hi['gamma']:g}",
                  bool(n["held_hi"] >= MAJORITY)),
        KeyNumber("reasoning anchors ordered along PC1 (|Spearman| with their value), at the end, γ = "
                  f"{gammas_text(parts)}",
                  " → ".join(values_text(p["order_end"]) for p in parts)
                  + f" (when the reasoning loss has halved: {' → '.join(values_text(p['order_half']) for p in parts)})",
                  f"ordered at small init: ≥ {ORDERED:g} at γ = {hi['gamma']:g}", bool(n["order_hi"] >= ORDERED)),
        KeyNumber("memory anchors alike: mean cosine within the memory anchors at the end, γ = "
                  f"{gammas_text(parts)}",
                  " → ".join(values_text(p["cos_memory_end"]) for p in parts)
                  + " (when the reasoning loss has halved: "
                  f"{' → '.join(values_text(p['cos_memory_half']) for p in parts)})",
                  f"more alike at small init: higher at γ = {hi['gamma']:g} than at γ = {lo['gamma']:g}",
                  bool(cos_m[hi["gamma"]] > cos_m[lo["gamma"]])),
        KeyNumber("mean cosine within the reasoning anchors at the end (at the reasoning halving epoch)",
                  " → ".join(f"{values_text(p['cos_reasoning_end'])} ({values_text(p['cos_reasoning_half'])})"
                             for p in parts),
                  "not asserted", None),
    ]


def draw_reason(paths: dict[str, Path], n: dict) -> Figures:
    """The loss of each kind of sample per γ, and the anchor embeddings per γ."""
    return {
        "group_loss.png": ("Training loss of the reasoning and the memory samples over training, one panel per γ, one "
                           "line per seed; dotted: accuracy on the held-out reasoning pairs.",
                           lineage_figures.group_loss_figure(n["parts"])),
        "anchors.png": ("Anchor embeddings at the end of training, one column per γ (member 0): cosine similarity of "
                        "the memory (1..10) and reasoning (11..20) anchors (top) and their PCA (bottom).",
                        lineage_figures.anchor_figure(n["parts"])),
    }


def reason_rows(n: dict) -> list[dict]:
    """``summary.csv`` of ``reason-memory``: one row per (γ, seed)."""
    return [{"gamma": p["gamma"], "seed": s, "half_epoch_reasoning": hr, "half_epoch_memory": hm, "max_loss_gap": g,
             "acc_reasoning": ar, "acc_memory": am, "heldout_accuracy": h, "reasoning_pc1_spearman": o,
             "cos_reasoning": cr, "cos_memory": cm}
            for p in n["parts"] for s, hr, hm, g, ar, am, h, o, cr, cm in zip(
                p["seeds"], p["half_reasoning"], p["half_memory"], p["max_gap"], p["acc_reasoning"], p["acc_memory"],
                p["heldout_end"], p["order_end"], p["cos_reasoning_end"], p["cos_memory_end"])]


def summarise_reason(n: dict) -> dict:
    """``summary.json`` of ``reason-memory``: every part but its anchor rows, and the thresholds."""
    return {"parts": [{k: v for k, v in p.items() if k != "anchor_rows"} for p in n["parts"]],
            "majority": MAJORITY, "ordered": ORDERED}


def describe_reason(n: dict) -> str:
    """The paragraph of ``reason-memory`` from :func:`measure_reason`."""
    parts, hi, leads, cos_m = n["parts"], n["hi"], n["leads"], n["cos_m"]
    held_hi, order_hi = n["held_hi"], n["order_hi"]
    return (
        f"The CBOW model was trained on reasoning (label = key + a1 + a2) and memory (fixed random label per key and "
        f"ordered anchor pair) samples at γ ∈ {{{gammas_text(parts, ', ')}}}. "
        + ("The reasoning loss halves before the memory loss at every γ tried" if n["all_first"]
           else "The reasoning loss does not halve first at every γ tried")
        + f"; the memory halving epoch over the reasoning one is {' → '.join(fmt(v, 2) for v in leads)} "
        f"from large to small initialization"
        + (", larger at the smallest initialization than at the largest" if leads[-1] > leads[0]
           else ", not larger at the smallest initialization than at the largest")
        + (", though not monotone in γ" if not n["monotone"] else "")
        + f". The largest gap between the two losses (memory minus reasoning) is "
        f"{' → '.join(fmt(ms.median(p['max_gap']), 2) for p in parts)} nats; at the end the training accuracy on "
        f"reasoning / memory samples is {' → '.join(_pair(p['acc_reasoning'], p['acc_memory']) for p in parts)}."
        + f" On the held-out pairs (11, 13), (13, 11) the accuracy at γ = {hi['gamma']:g} is {fmt(held_hi)}"
        + (": the rule is applied to unseen anchor pairs." if held_hi >= MAJORITY else
           f": the model does not generalise to them exactly (median distance of its answer from the label "
           f"{fmt(ms.median(hi['heldout_error']), 1)}).")
        + f" The reasoning anchors lie in value order along PC1 (|Spearman| {fmt(order_hi)} at "
        f"γ = {hi['gamma']:g}); the memory anchors' mean cosine is "
        f"{' → '.join(fmt(cos_m[p['gamma']]) for p in parts)} from large to small initialization."
    )


register(TrainedRecipe(
    name="reason-memory", figure="SPEC §9 reasoning vs memory anchors",
    expectation="small initialization favours the reasoning anchors (learned first); reasoning-anchor embeddings "
                "ordered, memory-anchor embeddings alike",
    cpu_time="≈ 3 min",
    paper=Paper("not a paper figure (SPEC §9 lineage benchmark, arXiv 2502.04375): small init favours "
                "the reasoning anchors; reasoning-anchor embeddings ordered, memory-anchor ones alike",
                "keys 21..120, memory anchors 1..10 (a fixed random label per (key, anchor)), reasoning "
                "anchors 11..20 (y = key + Σ anchors), q = 2, L = 9; reasoning pairs (11, 13), (13, 11) "
                "held out"),
    runs=lambda: {part_name(g): _reason_config(g) for g in REASON_GAMMAS},
    measure=measure_reason, judge=judge_reason, describe=describe_reason, draw=draw_reason,
    summary=summarise_reason, member_rows=reason_rows,
))

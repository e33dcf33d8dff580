"""The lineage tasks of SPEC §9: ``composite`` and ``reason-memory``.

    ctxstair run composite --out runs/composite            # about 3 min on 2 CPU cores
    ctxstair run reason-memory --out runs/reason-memory    # about 3 min

Both recipes train one part per γ (``gamma-0.3``, ...; the ensemble engine shares one γ among its
members), with the seeds as ensemble members (``--seeds K``, default 3), skip the alignment
analysis and read the snapshots themselves: the conclusion rebuilds each snapshot's model
(:func:`snapshot_model`) and evaluates it on the task's samples and held-out sets. ``summary.csv``
has one row per (γ, seed). Defaults, and why (docs/recipes.md has the measurements):

* ``composite`` (anchor functions): key ``x``, anchors ``a1, a2`` with shifts 1: +5, 2: +1, 3: −2,
  4: −8, pair (3, 4) → ``x − 6``, pair (4, 3) held out; on the held-out pair the *inferential*
  answer composes the shifts (``x − 10``) and the *symmetric* one repeats the (3, 4) rule
  (``x − 6``). Model: the attention-only model with learned positions (d = 128, d_k = 64), because
  the CBOW model sums its input embeddings: (x, 4, 3) and (x, 3, 4) are the same input to it, so it
  gives the symmetric answer by construction, whatever γ. The one-layer attention model predicts
  from the last position through one softmax over positions and cannot find a key that is marked
  only by its place before the anchors among noise tokens of the key range, so the sequences are
  ``(x, a1, a2)`` with no noise (``task.seq_len = 3``), and the residue rule is off
  (``task.residue_modulus = 0``: with one key position it would hold out whole keys, whose
  embeddings are then never trained). 2,000 training samples drawn from the 80 × 15 sequences,
  full-batch Adam lr 1e-3 (at lr 2e-3 γ = 0.8 spikes and falls back), 2000 epochs, γ ∈ {0.3, 0.5,
  0.8}. Expected (SPEC §9; the anchor-function work, arXiv 2405.05409): small initialization (large
  γ) → inferential.
* ``reason-memory`` (arXiv 2502.04375): keys 21..120, memory anchors 1..10, reasoning anchors 11..20,
  q = 2, held-out reasoning pairs (11, 13), (13, 11). Model: the CBOW model (ReLU, d = 128), the
  controlled model and the family of the paper's Emb-MLP. A CBOW model cannot find the key among
  noise tokens of the key range either, so ``task.seq_len = q + 1 = 3`` (key, a1, a2). It cannot
  tell (m1, m2) from (m2, m1) either, so memory samples whose key saw both orders with different
  labels cap its memory accuracy; the report gives that ceiling (:func:`order_blind_ceiling`).
  4,000 training samples, full-batch Adam lr 1e-3 (SPEC §11), 800 epochs (the memory loss halves
  by epoch ≈ 600), γ ∈ {0.3, 0.5, 1.0}: large, standard (0.5) and small initialization (1.0, the
  γ of SPEC §11). Expected (SPEC §9): small initialization favours the reasoning anchors; their
  embeddings ordered, the memory anchors' alike.

Measures (all read from the run directories): *inferential / symmetric fraction*: fraction of the
held-out samples (``meta["eval"]["heldout_pair"]``) whose argmax is ``y_inferential`` /
``y_symmetric``. *Loss per group*: mean cross-entropy over the training samples of each kind
(``meta["is_reasoning"]``) at every snapshot; *halving epoch*: first snapshot epoch at which it is
at most half its value at epoch 0. *Order along PC1*: |Spearman| between the tokens' coordinates on
the first principal component of their embedding rows and their values. *Mean cosine within a
group*: mean pairwise cosine of the group's embedding rows (≈ 0 for random rows).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.stats
import torch

from ctxstair import rundir
from ctxstair.alignment import mean_cosine
from ctxstair.alignment.pca import pca
from ctxstair.analysis import measures as ms
from ctxstair.config import (
    AnalysisConfig,
    InitConfig,
    ModelConfig,
    RunConfig,
    SnapshotConfig,
    TaskConfig,
    TrainConfig,
)
from ctxstair.models import Ensemble
from ctxstair.recipes.base import Figures, KeyNumber, Paper, TrainedRecipe, register
from ctxstair.report import lineage_figures
from ctxstair.report.formats import fmt, fmt_epochs
from ctxstair.run import Run
from ctxstair.tasks import Dataset

COMPOSITE_GAMMAS = (0.3, 0.5, 0.8)
REASON_GAMMAS = (0.3, 0.5, 1.0)
#: A held-out answer "is the model's answer" when at least this fraction of the held-out samples get it.
MAJORITY = 0.5
#: Every member must fit at least this fraction of its training samples for its held-out answer to count.
FITTED_ACC = 0.9
#: "Ordered": |Spearman| of the reasoning anchors' PC1 coordinates with their values at least this.
ORDERED = 0.9


def part_name(gamma: float) -> str:
    """The part (run directory) of one γ: ``gamma-0.8``."""
    return f"gamma-{gamma:g}"


# ------------------------------------------------------------------------------ shared measures

def snapshot_model(run: Path, epoch: int) -> tuple[Dataset, Ensemble]:
    """The dataset of ``run`` and its ensemble with the weights of the snapshot at ``epoch``."""
    run = Run(run)
    return run.dataset, run.model_at(epoch)


def logits(model: Ensemble, X: np.ndarray) -> torch.Tensor:
    """Logits (K, n, V) of every member on token ids X (n, L), without gradients."""
    with torch.no_grad():
        return model(torch.from_numpy(X))


def sample_losses(model: Ensemble, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Cross-entropy (K, n) of every member on every sample (X (n, L), y (n,))."""
    out = logits(model, X)
    K, n, V = out.shape
    target = torch.from_numpy(y).repeat(K)
    return torch.nn.functional.cross_entropy(out.reshape(K * n, V), target, reduction="none").view(K, n).numpy()


def order_along_pc1(rows: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """(|Spearman| between the rows' coordinates on their first principal component and ``values``,
    the fraction of the rows' variance that PC1 explains)."""
    coords, explained = pca(rows, 1)
    return float(abs(scipy.stats.spearmanr(coords[:, 0], values)[0])), float(explained[0])


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


def _gamma(run: Path) -> float:
    return float(Run(run).config.model.init.gamma)


def _values(values: list[float], digits: int = 2) -> str:
    """'0.62 [0.52, 0.66, 0.70]': the median over members, then every member's value."""
    return f"{fmt(ms.median(values), digits)} [{', '.join(fmt(v, digits) for v in values)}]"


def _answer(offset: int) -> str:
    """An answer as an offset from the key: 'x − 10', 'x + 6'."""
    return f"x {'−' if offset < 0 else '+'} {abs(offset)}"


def _gammas(parts: list[dict], sep: str = " → ") -> str:
    """The parts' γ values, '0.3 → 0.5 → 1'."""
    return sep.join(f"{p['gamma']:g}" for p in parts)




def _config(name: str, task: TaskConfig, model: ModelConfig, epochs: int, every: int) -> RunConfig:
    return RunConfig(recipe=name, task=task, model=model,
                     train=TrainConfig(optimizer="adam", lr=1e-3, epochs=epochs, members=3),
                     snapshots=SnapshotConfig(log_points=16, every=every), analysis=AnalysisConfig(enabled=False))


# ------------------------------------------------------------------------------ composite

def _composite_config(gamma: float) -> RunConfig:
    task = TaskConfig("composite", {"seq_len": 3, "residue_modulus": 0, "n_samples": 2000})
    model = ModelConfig(kind="attention", d=128, d_k=64, positional=True, init=InitConfig(gamma=gamma))
    return _config("composite", task, model, epochs=2000, every=200)


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
        gamma=_gamma(run), seeds=ms.member_seeds(run), epochs=epochs,
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
            f"{_values(p['inferential_end'])} / {_values(p['symmetric_end'])} / {_values(p['other_end'])}; "
            f"most common other answer per seed: {other}",
            "inferential at small init (large γ)", None))
    return keys + [
        KeyNumber("training accuracy at the end, per γ",
                  "; ".join(f"γ = {p['gamma']:g}: {_values(p['train_acc'], 3)}" for p in parts),
                  f"every seed fits its training set (≥ {FITTED_ACC:g}), so that its held-out answer means something",
                  n["fitted"]),
        KeyNumber("symmetric answer at large init",
                  f"{_values(lo['symmetric_end'])} at γ = {lo['gamma']:g}",
                  "the predecessor work's large-init answer; not asserted (SPEC §9 names the small-init side)", None),
        KeyNumber("keys ordered along PC1 of their embeddings (|Spearman| with the key value), per γ",
                  "; ".join(f"γ = {p['gamma']:g}: {_values(p['key_order'])} (PC1 explains "
                            f"{_values(p['key_pc1_variance'])} of the variance)" for p in parts),
                  "not asserted (SPEC §9 asks for the keys' PCA)", None),
    ]


def describe_composite(n: dict) -> str:
    """The paragraph of ``composite`` from :func:`measure_composite`."""
    parts, lo, hi, inf_lo, inf_hi = n["parts"], n["lo"], n["hi"], n["inf_lo"], n["inf_hi"]
    return (
        "The attention-only model (learned positions; the CBOW model would see (x, 4, 3) and (x, 3, 4) as one "
        f"input) was trained on the composite task at γ ∈ {{{_gammas(parts, ', ')}}} and asked for the held-out "
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


# ------------------------------------------------------------------------------ reason-memory

def _reason_config(gamma: float) -> RunConfig:
    task = TaskConfig("reason_memory", {"seq_len": 3, "n_samples": 4000})
    model = ModelConfig(kind="cbow", d=128, activation="relu", init=InitConfig(gamma=gamma))
    return _config("reason-memory", task, model, epochs=800, every=25)


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
        gamma=_gamma(run), seeds=ms.member_seeds(run), epochs=epochs.tolist(),
        loss_reasoning=loss_r.tolist(), loss_memory=loss_m.tolist(), heldout=heldout.tolist(),
        half_reasoning=half_r, half_memory=half_m,
        max_gap=gap.max(axis=1).tolist(), max_gap_epoch=epochs[gap.argmax(axis=1)].tolist(),
        acc_reasoning=(pred[:, is_r] == dataset.y[is_r]).mean(axis=1).tolist(),
        acc_memory=(pred[:, ~is_r] == dataset.y[~is_r]).mean(axis=1).tolist(),
        heldout_end=heldout[:, -1].tolist(),
        heldout_error=np.median(np.abs(held_pred - held["y"]), axis=1).tolist(),
        ceiling_memory=order_blind_ceiling(dataset.X[~is_r], dataset.y[~is_r]),
        **{f"{k}_end": [e[k] for e in end] for k in end[0]},
        **{f"{k}_half": [h[k] for h in at_half] for k in at_half[0]},
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
                  f"lead {' → '.join(fmt(v, 2) for v in leads)} at γ = {_gammas(parts)}"
                  + ("" if n["all_first"] else "; the memory loss halves first (or together) for some seed"),
                  f"reasoning first at γ = {hi['gamma']:g}; lead larger at γ = {hi['gamma']:g} than at "
                  f"γ = {lo['gamma']:g}",
                  bool(n["first_hi"] and leads[-1] > leads[0])),
    ]
    for p in parts:
        keys.append(KeyNumber(
            f"γ = {p['gamma']:g}: epoch at which the training loss has halved, reasoning / memory samples",
            f"{fmt_epochs(p['half_reasoning'])} / {fmt_epochs(p['half_memory'])} (lead "
            f"{fmt(_lead(p), 2)}); largest memory − reasoning loss {_values(p['max_gap'])} nats at epoch "
            f"{fmt_epochs(p['max_gap_epoch'])}; "
            "accuracy at the end "
            f"{_values(p['acc_reasoning'])} / {_values(p['acc_memory'])} (order-blind ceiling for memory "
            f"{fmt(p['ceiling_memory'])})", "reasoning first at small init", None))
    return keys + [
        KeyNumber(f"accuracy on the held-out reasoning pairs (11, 13), (13, 11) at the end, γ = "
                  f"{_gammas(parts)}",
                  " → ".join(_values(p["heldout_end"]) for p in parts)
                  + f"; median |answer − label| {' → '.join(_values(p['heldout_error'], 1) for p in parts)}",
                  f"small init generalises to the held-out pairs: ≥ {MAJORITY:g} at γ = {hi['gamma']:g}",
                  bool(n["held_hi"] >= MAJORITY)),
        KeyNumber("reasoning anchors ordered along PC1 (|Spearman| with their value), at the end, γ = "
                  f"{_gammas(parts)}",
                  " → ".join(_values(p["order_end"]) for p in parts)
                  + f" (when the reasoning loss has halved: {' → '.join(_values(p['order_half']) for p in parts)})",
                  f"ordered at small init: ≥ {ORDERED:g} at γ = {hi['gamma']:g}", bool(n["order_hi"] >= ORDERED)),
        KeyNumber("memory anchors alike: mean cosine within the memory anchors at the end, γ = "
                  f"{_gammas(parts)}",
                  " → ".join(_values(p["cos_memory_end"]) for p in parts)
                  + " (when the reasoning loss has halved: "
                  f"{' → '.join(_values(p['cos_memory_half']) for p in parts)})",
                  f"more alike at small init: higher at γ = {hi['gamma']:g} than at γ = {lo['gamma']:g}",
                  bool(cos_m[hi["gamma"]] > cos_m[lo["gamma"]])),
        KeyNumber("mean cosine within the reasoning anchors at the end (at the reasoning halving epoch)",
                  " → ".join(f"{_values(p['cos_reasoning_end'])} ({_values(p['cos_reasoning_half'])})" for p in parts),
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
        f"ordered anchor pair) samples at γ ∈ {{{_gammas(parts, ', ')}}}. "
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

"""Early geometry = order 0 (SPEC §8 F1, F2b): ``early-geometry``.

    ctxstair run early-geometry --out runs/early-geometry     # add, sub, mul at N = 20, ReLU and tanh

The model follows ``staircase-add`` (CBOW, d = 128, γ = 1, full-batch gradient descent, lr 2), with
ReLU and with tanh side by side, 2000 epochs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.alignment import cosine_matrix, fourier_signatures, partial_correlation, signature_cosine
from ctxstair.analysis import measures as ms
from ctxstair.config import AnalysisConfig, InitConfig, ModelConfig, RunConfig, TaskConfig, TrainConfig
from ctxstair.recipes.base import SPEC8_SETTINGS, Figures, KeyNumber, Paper, TrainedRecipe, register
from ctxstair.report import run_figures
from ctxstair.report.formats import fmt

#: Odd-part classes of 1..20 with at least three members: {1,2,4,8,16}, {3,6,12}, {5,10,20} (F2b, mul).
ODD_PART_CLUSTERS = ((1, 2, 4, 8, 16), (3, 6, 12), (5, 10, 20))
EARLY_EPOCH = 100


def _config(task: str, activation: str) -> RunConfig:
    """The part of ``task`` (N = 20) with ``activation``."""
    return RunConfig(recipe="early-geometry", task=TaskConfig(task, {"N": 20}),
                     model=ModelConfig(d=128, activation=activation, init=InitConfig(gamma=1.0)),
                     train=TrainConfig(optimizer="gd", lr=2.0, epochs=2000), analysis=AnalysisConfig(enabled=True))


def cluster_contrast(S: np.ndarray, tokens: np.ndarray, clusters=ODD_PART_CLUSTERS) -> float:
    """Mean cosine within the given token clusters minus mean cosine between them (pairs a < b)."""
    label = {t: c for c, group in enumerate(clusters) for t in group}
    index = [int(np.flatnonzero(tokens == t)[0]) for t in label]
    groups = np.array(list(label.values()))
    sub = S[np.ix_(index, index)]
    upper = np.triu(np.ones_like(sub, dtype=bool), 1)
    same = groups[:, None] == groups[None, :]
    return float(sub[upper & same].mean() - sub[upper & ~same].mean())


def cluster_contrast_null(S: np.ndarray, tokens: np.ndarray, n: int = 2000, seed: int = 0) -> np.ndarray:
    """Contrasts of ``n`` random partitions of the same tokens into clusters of the same sizes."""
    rng = np.random.default_rng(seed)
    members = np.array([t for group in ODD_PART_CLUSTERS for t in group])
    sizes = np.cumsum([len(g) for g in ODD_PART_CLUSTERS])[:-1]
    return np.array([cluster_contrast(S, tokens, np.split(rng.permutation(members), sizes)) for _ in range(n)])


def part_numbers(part: str, run: Path) -> dict:
    """The numbers of one part of ``early-geometry``: Pearson and Spearman of S^emb with S^sig,(0) at
    epoch EARLY_EPOCH (``pearson_at_100``, ``spearman_at_100``); for mul the odd-part clusters
    (:func:`odd_part_clusters`), for add the odd/even split (:func:`odd_even_split`)."""
    table = rundir.read_alignment(run)
    epochs, r = rundir.alignment_series(table, "order0", 0)
    _, rho = rundir.alignment_series(table, "order0", 0, "spearman")
    pearson, spearman = ms.value_at(epochs, r, EARLY_EPOCH), ms.value_at(epochs, rho, EARLY_EPOCH)
    numbers = {"pearson_at_100": pearson, "spearman_at_100": spearman}
    task = part.split("-")[-1]
    if task == "mul":
        numbers.update(odd_part_clusters(run))
    if task == "add":
        numbers.update(odd_even_split(run))
    return numbers


#: Numbers of :func:`part_numbers` that ``summary.json`` leaves out (the report's labels).
_UNSUMMARISED = ("k_half", "last_epoch")


def measure_early(out: Path, paths: dict[str, Path]) -> dict[str, dict]:
    """Part -> :func:`part_numbers` of ``early-geometry`` (add, sub, mul; ReLU and tanh)."""
    return {part: part_numbers(part, run) for part, run in paths.items()}


def judge_early(parts: dict[str, dict]) -> list[KeyNumber]:
    """The key numbers of ``early-geometry`` from :func:`measure_early`, part by part."""
    keys = []
    for part, n in parts.items():
        keys.append(KeyNumber(f"{part}: Pearson (Spearman) of S^emb with S^sig,(0) at epoch {EARLY_EPOCH}",
                              f"{fmt(n['pearson_at_100'])} ({fmt(n['spearman_at_100'])})", "≥ 0.9",
                              bool(n["pearson_at_100"] >= 0.9)))
        if "cluster_contrast" in n:
            keys.append(KeyNumber(f"{part}: odd-part clusters {{1,2,4,8,16}}, {{3,6,12}}, {{5,10,20}} in S^emb at "
                                  "epoch 100 (within − between mean cosine)",
                                  f"{fmt(n['cluster_contrast'])} (random partitions: 99th percentile "
                                  f"{fmt(n['null_p99'])}; in S^sig,(0): {fmt(n['signature_contrast'])})",
                                  "above the 99th percentile of random partitions of the same sizes",
                                  bool(n["cluster_contrast"] > n["null_p99"])))
        if "parity_early" in n:
            keys.append(KeyNumber(f"{part} (F1): alignment via c_k, k = N/2 = {n['k_half']} (odd/even), epoch "
                                  f"{EARLY_EPOCH} → {n['last_epoch']} (controlling for S^sig,(0))",
                                  f"{fmt(n['parity_early'])} → {fmt(n['parity_late'])} "
                                  f"({fmt(n['parity_partial_early'])} → {fmt(n['parity_partial_late'])})",
                                  "ordered line early; odd/even split late (rises by ≥ 0.1; seen with ReLU)",
                                  bool(n["parity_late"] - n["parity_early"] >= 0.1)))
    return keys


def describe_early(parts: dict[str, dict]) -> str:
    """The paragraph of ``early-geometry`` from :func:`measure_early`."""
    return (
        "At epoch 100 the embedding similarity of each task is compared with the similarity of the tokens' order-0 "
        "label signatures: " + "; ".join(f"{p} Pearson {fmt(s['pearson_at_100'])}" for p, s in parts.items())
        + ". With tanh, whose slope at 0 is 1, every token's embedding first moves along its own order-0 signature "
        "mapped by W_U, and the early geometry is the order-0 geometry for all three tasks (a band for add, an X for "
        "sub, odd-part clusters for mul). With ReLU, the paper's activation, the gate 1{h > 0} depends on the random "
        "initial embeddings and adds a token-specific part to each drift; the late odd/even split of add (F1) is "
        "seen with ReLU."
    )


def draw_early(paths: dict[str, Path], parts: dict[str, dict]) -> Figures:
    """Per part: S^emb and the PCA at epoch EARLY_EPOCH next to the signatures; for add the PCA early vs late (F1)."""
    figures = {}
    for part, run in paths.items():
        figures[f"geometry_{part}.png"] = (f"{part}: S^emb at epoch {EARLY_EPOCH} next to the signature geometry.",
                                           run_figures.geometry_figure(run, [EARLY_EPOCH]))
        figures[f"pca_{part}.png"] = (f"{part}: PCA of embeddings at epoch {EARLY_EPOCH} "
                                      "next to PCA of the signatures.",
                                      run_figures.pca_figure(run, [EARLY_EPOCH]))
        if "parity_early" in parts[part]:
            figures[f"f1_{part}_pca.png"] = (f"F1, {part}: PCA early (ordered line) vs late.",
                                             run_figures.pca_figure(run, [EARLY_EPOCH, parts[part]["last_epoch"]]))
    return figures


def odd_part_clusters(run: Path) -> dict:
    """F2b for mul: the odd-part clusters in S^emb at epoch 100 (``cluster_contrast``) against the 99th
    percentile of random partitions (``null_p99``) and in S^sig,(0) (``signature_contrast``)."""
    sigs = rundir.read_signatures(run)
    S_emb = cosine_matrix(rundir.load_snapshot(run, EARLY_EPOCH)["W_E"][0][sigs.tokens])
    contrast, null = cluster_contrast(S_emb, sigs.tokens), cluster_contrast_null(S_emb, sigs.tokens)
    sig_contrast = cluster_contrast(signature_cosine(sigs.orders[0]), sigs.tokens)
    return dict(cluster_contrast=contrast, null_p99=float(np.quantile(null, 0.99)), signature_contrast=sig_contrast)


def odd_even_split(run: Path) -> dict:
    """F1 for add: alignment through c_{N/2} (odd/even, k = ``k_half``) at epoch 100 and at the end
    (``last_epoch``); next to it the same alignment with S^sig,(0) partialled out (SPEC §3), since the
    order-0 band dominates S^emb."""
    last = rundir.snapshot_times(run)[-1]
    ks, early = ms.fourier_profile(run, 0, EARLY_EPOCH)
    _, late = ms.fourier_profile(run, 0, last)
    sigs = rundir.read_signatures(run)
    S_parity = signature_cosine(fourier_signatures(sigs.orders[1], [int(ks[-1])])[0])
    S0 = signature_cosine(sigs.orders[0])
    partial = [float(partial_correlation(cosine_matrix(rundir.load_snapshot(run, epoch)["W_E"][0, sigs.tokens]
                                                       .astype(np.float64)), S_parity, S0))
               for epoch in (EARLY_EPOCH, last)]
    return dict(parity_early=float(early[-1]), parity_late=float(late[-1]), parity_partial_early=partial[0],
                parity_partial_late=partial[1], k_half=ks[-1], last_epoch=last)


register(TrainedRecipe(
    name="early-geometry", figure="SPEC §8 F1, F2b",
    expectation="S^emb ≈ S^sig,(0) at epoch 100 for add, sub, mul (Pearson ≥ 0.9); mul clusters by odd part; "
                "add: odd/even late (ReLU and tanh side by side)",
    cpu_time="≈ 40 s",
    paper=Paper("early geometry = order 0: S^emb ≈ S^sig,(0) at epoch ≈ 100 (band for add, 'X' for sub, "
                "odd-part clusters for mul); F1: ordered line early, odd/even split late",
                f"X = (x1, x2), x ∈ 1..N, N = 20, all N² pairs; add, sub = |x1 − x2|, mul; {SPEC8_SETTINGS}"),
    runs=lambda: {f"{act}-{task}": _config(task, act)
                  for act in ("relu", "tanh") for task in ("add", "sub", "mul")},
    measure=measure_early, judge=judge_early, describe=describe_early, draw=draw_early,
    summary=lambda parts: {part: {k: v for k, v in n.items() if k not in _UNSUMMARISED} for part, n in parts.items()},
))

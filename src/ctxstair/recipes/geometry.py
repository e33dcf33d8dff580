"""Early geometry = order 0 (SPEC §8 F1, F2b) and the single-token label law (F2a).

    ctxstair run early-geometry --out runs/early-geometry     # add, sub, mul at N = 20, ReLU and tanh
    ctxstair run label-law --out runs/label-law               # four prescribed label laws

Models follow ``staircase-add`` (ReLU CBOW, d = 128, γ = 1, full-batch gradient descent, lr 2);
``label-law`` uses lr 0.5, since at lr 2 the sharply peaked normal law makes gradient descent
oscillate (its loss returns to ln V).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ctxstair import rundir
from ctxstair.alignment import (
    cosine_matrix,
    distribution_match,
    fourier_signatures,
    partial_correlation,
    signature_cosine,
)
from ctxstair.config import AnalysisConfig, InitConfig, ModelConfig, RunConfig, TaskConfig, TrainConfig
from ctxstair.recipes.base import KeyNumber, Outcome, Recipe, register
from ctxstair.report import label_law_figures, run_figures
from ctxstair.report import measures as ms
from ctxstair.run import Run

#: Odd-part classes of 1..20 with at least three members: {1,2,4,8,16}, {3,6,12}, {5,10,20} (F2b, mul).
ODD_PART_CLUSTERS = ((1, 2, 4, 8, 16), (3, 6, 12), (5, 10, 20))
EARLY_EPOCH = 100


def _config(name: str, task: str, params: dict, epochs: int, lr: float = 2.0, analysis: bool = True,
            activation: str = "relu") -> RunConfig:
    return RunConfig(recipe=name, task=TaskConfig(task, params),
                     model=ModelConfig(d=128, activation=activation, init=InitConfig(gamma=1.0)),
                     train=TrainConfig(optimizer="gd", lr=lr, epochs=epochs),
                     analysis=AnalysisConfig(enabled=analysis))


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


def conclude_early(out: Path, paths: dict[str, Path]) -> Outcome:
    """The key numbers, paragraph and figures of ``early-geometry`` (add, sub, mul; ReLU and tanh), from files."""
    keys, figures, summary = [], {}, {}
    for part, run in paths.items():
        table = rundir.read_alignment(run)
        epochs, r = rundir.alignment_series(table, "order0", 0)
        _, rho = rundir.alignment_series(table, "order0", 0, "spearman")
        pearson, spearman = ms.value_at(epochs, r, EARLY_EPOCH), ms.value_at(epochs, rho, EARLY_EPOCH)
        summary[part] = {"pearson_at_100": pearson, "spearman_at_100": spearman}
        keys.append(KeyNumber(f"{part}: Pearson (Spearman) of S^emb with S^sig,(0) at epoch {EARLY_EPOCH}",
                              f"{ms.fmt(pearson)} ({ms.fmt(spearman)})", "≥ 0.9", bool(pearson >= 0.9)))
        figures[f"geometry_{part}.png"] = (f"{part}: S^emb at epoch {EARLY_EPOCH} next to the signature geometry.",
                                           run_figures.geometry_figure(run, [EARLY_EPOCH]))
        figures[f"pca_{part}.png"] = (f"{part}: PCA of embeddings at epoch {EARLY_EPOCH} "
                                      "next to PCA of the signatures.",
                                      run_figures.pca_figure(run, [EARLY_EPOCH]))
        task = part.split("-")[-1]
        if task == "mul":
            keys.append(_odd_part_clusters(part, run, summary[part]))
        if task == "add":
            keys.append(_odd_even_split(part, run, summary[part]))
            last = rundir.snapshot_times(run)[-1]
            figures[f"f1_{part}_pca.png"] = (f"F1, {part}: PCA early (ordered line) vs late.",
                                             run_figures.pca_figure(run, [EARLY_EPOCH, last]))
    paragraph = (
        "At epoch 100 the embedding similarity of each task is compared with the similarity of the tokens' order-0 "
        "label signatures: " + "; ".join(f"{p} Pearson {ms.fmt(s['pearson_at_100'])}" for p, s in summary.items())
        + ". With tanh, whose slope at 0 is 1, every token's embedding first moves along its own order-0 signature "
        "mapped by W_U, and the early geometry is the order-0 geometry for all three tasks (a band for add, an X for "
        "sub, odd-part clusters for mul). With ReLU, the paper's activation, the gate 1{h > 0} depends on the random "
        "initial embeddings and adds a token-specific part to each drift; the late odd/even split of add (F1) is "
        "seen with ReLU."
    )
    return Outcome(keys, paragraph, figures, summary)


def _odd_part_clusters(part: str, run: Path, summary: dict) -> KeyNumber:
    """F2b for mul: the odd-part clusters in S^emb at epoch 100 against random partitions."""
    sigs = rundir.read_signatures(run)
    S_emb = cosine_matrix(rundir.load_snapshot(run, EARLY_EPOCH)["W_E"][0][sigs.tokens])
    contrast, null = cluster_contrast(S_emb, sigs.tokens), cluster_contrast_null(S_emb, sigs.tokens)
    sig_contrast = cluster_contrast(signature_cosine(sigs.orders[0]), sigs.tokens)
    p99 = float(np.quantile(null, 0.99))
    summary.update(cluster_contrast=contrast, null_p99=p99, signature_contrast=sig_contrast)
    return KeyNumber(f"{part}: odd-part clusters {{1,2,4,8,16}}, {{3,6,12}}, {{5,10,20}} in S^emb at epoch 100 "
                     "(within − between mean cosine)",
                     f"{ms.fmt(contrast)} (random partitions: 99th percentile {ms.fmt(p99)}; "
                     f"in S^sig,(0): {ms.fmt(sig_contrast)})",
                     "above the 99th percentile of random partitions of the same sizes", bool(contrast > p99))


def _odd_even_split(part: str, run: Path, summary: dict) -> KeyNumber:
    """F1 for add: alignment through c_{N/2} (odd/even) at epoch 100 and at the end; next to it the
    same alignment with S^sig,(0) partialled out (SPEC §3), since the order-0 band dominates S^emb."""
    last = rundir.snapshot_times(run)[-1]
    ks, early = ms.fourier_profile(run, 0, EARLY_EPOCH)
    _, late = ms.fourier_profile(run, 0, last)
    sigs = rundir.read_signatures(run)
    S_parity = signature_cosine(fourier_signatures(sigs.orders[1], [int(ks[-1])])[0])
    S0 = signature_cosine(sigs.orders[0])
    partial = [float(partial_correlation(cosine_matrix(rundir.load_snapshot(run, epoch)["W_E"][0, sigs.tokens]
                                                       .astype(np.float64)), S_parity, S0))
               for epoch in (EARLY_EPOCH, last)]
    summary.update(parity_early=float(early[-1]), parity_late=float(late[-1]), parity_partial_early=partial[0],
                   parity_partial_late=partial[1])
    return KeyNumber(f"{part} (F1): alignment via c_k, k = N/2 = {ks[-1]} (odd/even), epoch {EARLY_EPOCH} → {last} "
                     "(controlling for S^sig,(0))",
                     f"{ms.fmt(float(early[-1]))} → {ms.fmt(float(late[-1]))} "
                     f"({ms.fmt(partial[0])} → {ms.fmt(partial[1])})",
                     "ordered line early; odd/even split late (rises by ≥ 0.1; seen with ReLU)",
                     bool(late[-1] - early[-1] >= 0.1))


def predicted_law(run: Path, anchor: int, epoch: int, labels: np.ndarray) -> tuple[np.ndarray, float]:
    """softmax(W_U w^E_a) of member 0 at ``epoch`` (SPEC §3 single-token check) restricted to
    ``labels`` and renormalised there, and the probability mass it puts outside ``labels``."""
    W = rundir.load_snapshot(run, epoch)
    p = torch.softmax(torch.from_numpy(W["W_U"][0] @ W["W_E"][0, anchor]).double(), dim=0).numpy()
    inside = p[labels].sum()
    return p[labels] / inside, float(1.0 - inside)


def conclude_label_law(out: Path, paths: dict[str, Path]) -> Outcome:
    """The key numbers, paragraph and figure of ``label-law``: each law's predicted against its data law."""
    keys, summary, laws = [], {}, {}
    for law, run in paths.items():
        sigs = rundir.read_signatures(run)
        epoch = rundir.snapshot_times(run)[-1]
        # Compare on the law's label range 0..n_context-1, not on all V ids: the zeros outside it
        # would make any model that learned which labels exist look well matched.
        labels = np.arange(Run(run).config.task.params.get("n_context", 51))
        p_data = np.zeros(labels.size)
        p_data[sigs.labels] = sigs.orders[0][0]
        p_model, outside = predicted_law(run, int(sigs.tokens[0]), epoch, labels)
        match = distribution_match(p_model, p_data)
        # The paper correlates with the prescribed law p_a; the model only ever sees one finite draw of it.
        p_law = Run(run).dataset.meta["label_law"]
        prescribed = {k: float(v) for k, v in distribution_match(p_model, p_law).items()}
        summary[law] = {"epoch": epoch, "mass_outside_labels": outside, **{k: float(v) for k, v in match.items()},
                        "prescribed": prescribed}
        laws[law] = (labels, p_data, p_law, p_model, epoch, match)
        keys.append(KeyNumber(f"{law}: softmax(W_U w_a) vs φ^(y;0)_a at epoch {epoch} (labels 0..{labels[-1]})",
                              f"Pearson r {ms.fmt(match['pearson'])}, KL {ms.fmt(match['kl'], 4)}, "
                              f"JSD {ms.fmt(match['jsd'], 4)}"
                              f"; mass outside the labels {ms.fmt(outside, 4)}",
                              "r ≥ 0.9, small KL and JSD", bool(match["pearson"] >= 0.9)))
        keys.append(KeyNumber(f"{law}: softmax(W_U w_a) vs the prescribed law p_a at epoch {epoch}",
                              f"Pearson r {ms.fmt(prescribed['pearson'])}, KL {ms.fmt(prescribed['kl'], 4)}, "
                              f"JSD {ms.fmt(prescribed['jsd'], 4)}",
                              "reported: the model is trained on one draw of p_a, so it matches the draw (the "
                              "row above), and p_a only as far as the draw does (Pearson is undefined for the "
                              "constant uniform law: read KL and JSD)", None))
    paragraph = (
        "One anchor token sits in every sequence and its labels follow a prescribed law. After training, the "
        "distribution predicted from the anchor's embedding alone, softmax(W_U w_a), is compared with the anchor's "
        "order-0 label signature (the empirical label law): "
        + "; ".join(f"{law} r = {ms.fmt(s['pearson'])}" for law, s in summary.items())
        + ". Against the prescribed laws p_a themselves (what the paper correlates with) the JSD is "
        + "; ".join(f"{law} {ms.fmt(s['prescribed']['jsd'], 4)}" for law, s in summary.items()) + " nats."
    )
    figure = label_law_figures.label_law_figure(laws)
    return Outcome(keys, paragraph,
                   {"label_laws.png": ("Predicted, empirical and prescribed label law of the anchor, per law.",
                                      figure)},
                   summary)


register(Recipe(
    name="early-geometry", figure="SPEC §8 F1, F2b",
    expectation="S^emb ≈ S^sig,(0) at epoch 100 for add, sub, mul (Pearson ≥ 0.9); mul clusters by odd part; "
                "add: odd/even late (ReLU and tanh side by side)",
    cpu_time="≈ 40 s",
    runs=lambda: {f"{act}-{task}": _config("early-geometry", task, {"N": 20}, 2000, activation=act)
                  for act in ("relu", "tanh") for task in ("add", "sub", "mul")},
    conclude=conclude_early,
))

register(Recipe(
    name="label-law", figure="SPEC §8 F2a",
    expectation="softmax(W_U w_a) ≈ φ^(y;0)_a at epoch 200 for four label laws (Pearson ≥ 0.9, small KL/JSD)",
    cpu_time="≈ 5 s",
    runs=lambda: {law: _config("label-law", "label_law", {"law": law}, 200, lr=0.5, analysis=False)
                  for law in ("uniform", "normal", "poisson", "exp")},
    conclude=conclude_label_law,
))

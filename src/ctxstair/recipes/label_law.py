"""The single-token label law (SPEC §8 F2a): ``label-law``.

    ctxstair run label-law --out runs/label-law               # four prescribed label laws

The model follows ``staircase-add`` (ReLU CBOW, d = 128, γ = 1, full-batch gradient descent) at
lr 0.5, since at lr 2 the sharply peaked normal law makes gradient descent oscillate (its loss
returns to ln V); 200 epochs, no alignment analysis.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ctxstair import rundir
from ctxstair.alignment import distribution_match
from ctxstair.config import AnalysisConfig, InitConfig, ModelConfig, RunConfig, TaskConfig, TrainConfig
from ctxstair.recipes.base import SPEC8_SETTINGS, Figures, KeyNumber, Paper, TrainedRecipe, register
from ctxstair.report import label_law_figures
from ctxstair.report.formats import fmt
from ctxstair.run import Run


def _config(law: str) -> RunConfig:
    """The part of label law ``law``."""
    return RunConfig(recipe="label-law", task=TaskConfig("label_law", {"law": law}),
                     model=ModelConfig(d=128, activation="relu", init=InitConfig(gamma=1.0)),
                     train=TrainConfig(optimizer="gd", lr=0.5, epochs=200), analysis=AnalysisConfig(enabled=False))


def predicted_law(run: Path, anchor: int, epoch: int, labels: np.ndarray) -> tuple[np.ndarray, float]:
    """softmax(W_U w^E_a) of member 0 at ``epoch`` (SPEC §3 single-token check) restricted to
    ``labels`` and renormalised there, and the probability mass it puts outside ``labels``."""
    W = rundir.load_snapshot(run, epoch)
    p = torch.softmax(torch.from_numpy(W["W_U"][0] @ W["W_E"][0, anchor]).double(), dim=0).numpy()
    inside = p[labels].sum()
    return p[labels] / inside, float(1.0 - inside)


def law_numbers(run: Path) -> dict:
    """The numbers of one law of ``label-law`` at its last snapshot (``epoch``): the model's law
    ``p_model`` on the labels 0..n_context-1 (``labels``) and the mass it puts outside them
    (``outside``), compared (:func:`~ctxstair.alignment.distribution_match`) with the anchor's
    empirical label law ``p_data`` (``match``) and with the prescribed law ``p_law`` (``prescribed``)."""
    sigs = rundir.read_signatures(run)
    epoch = rundir.snapshot_times(run)[-1]
    # Compare on the law's label range 0..n_context-1, not on all V ids: the zeros outside it
    # would make any model that learned which labels exist look well matched.
    labels = np.arange(Run(run).config.task.params.get("n_context", 51))
    p_data = np.zeros(labels.size)
    p_data[sigs.labels] = sigs.orders[0][0]
    p_model, outside = predicted_law(run, int(sigs.tokens[0]), epoch, labels)
    # The paper correlates with the prescribed law p_a; the model only ever sees one finite draw of it.
    p_law = Run(run).dataset.meta["label_law"]
    return dict(epoch=epoch, labels=labels, p_data=p_data, p_law=p_law, p_model=p_model, outside=outside,
                match=distribution_match(p_model, p_data),
                prescribed={k: float(v) for k, v in distribution_match(p_model, p_law).items()})


def measure_label_law(out: Path, paths: dict[str, Path]) -> dict[str, dict]:
    """Law -> :func:`law_numbers` of ``label-law``."""
    return {law: law_numbers(run) for law, run in paths.items()}


def judge_label_law(laws: dict[str, dict]) -> list[KeyNumber]:
    """Two key numbers per law from :func:`measure_label_law`: against the data law (judged) and
    against the prescribed law (reported)."""
    keys = []
    for law, n in laws.items():
        match, prescribed, epoch = n["match"], n["prescribed"], n["epoch"]
        keys.append(KeyNumber(f"{law}: softmax(W_U w_a) vs φ^(y;0)_a at epoch {epoch} (labels 0..{n['labels'][-1]})",
                              f"Pearson r {fmt(match['pearson'])}, KL {fmt(match['kl'], 4)}, "
                              f"JSD {fmt(match['jsd'], 4)}"
                              f"; mass outside the labels {fmt(n['outside'], 4)}",
                              "r ≥ 0.9, small KL and JSD", bool(match["pearson"] >= 0.9)))
        keys.append(KeyNumber(f"{law}: softmax(W_U w_a) vs the prescribed law p_a at epoch {epoch}",
                              f"Pearson r {fmt(prescribed['pearson'])}, KL {fmt(prescribed['kl'], 4)}, "
                              f"JSD {fmt(prescribed['jsd'], 4)}",
                              "reported: the model is trained on one draw of p_a, so it matches the draw (the "
                              "row above), and p_a only as far as the draw does (Pearson is undefined for the "
                              "constant uniform law: read KL and JSD)", None))
    return keys


def describe_label_law(laws: dict[str, dict]) -> str:
    """The paragraph of ``label-law`` from :func:`measure_label_law`."""
    return (
        "One anchor token sits in every sequence and its labels follow a prescribed law. After training, the "
        "distribution predicted from the anchor's embedding alone, softmax(W_U w_a), is compared with the anchor's "
        "order-0 label signature (the empirical label law): "
        + "; ".join(f"{law} r = {fmt(float(n['match']['pearson']))}" for law, n in laws.items())
        + ". Against the prescribed laws p_a themselves (what the paper correlates with) the JSD is "
        + "; ".join(f"{law} {fmt(n['prescribed']['jsd'], 4)}" for law, n in laws.items()) + " nats."
    )


def draw_label_law(paths: dict[str, Path], laws: dict[str, dict]) -> Figures:
    """One panel per law: the predicted, empirical and prescribed label law."""
    figure = label_law_figures.label_law_figure({law: (n["labels"], n["p_data"], n["p_law"], n["p_model"], n["epoch"],
                                                       n["match"]) for law, n in laws.items()})
    return {"label_laws.png": ("Predicted, empirical and prescribed label law of the anchor, per law.", figure)}


def summarise_label_law(laws: dict[str, dict]) -> dict:
    """``summary.json`` of ``label-law``: per law the epoch, the mass outside the labels and both comparisons."""
    return {law: {"epoch": n["epoch"], "mass_outside_labels": n["outside"],
                  **{k: float(v) for k, v in n["match"].items()}, "prescribed": n["prescribed"]}
            for law, n in laws.items()}


register(TrainedRecipe(
    name="label-law", figure="SPEC §8 F2a",
    expectation="softmax(W_U w_a) ≈ φ^(y;0)_a at epoch 200 for four label laws (Pearson ≥ 0.9, small KL/JSD)",
    cpu_time="≈ 5 s",
    paper=Paper("softmax(W_U w_a) ≈ φ^(y;0)_a: high r, small KL/JSD",
                "anchor a = 100, context 0..50, all 2,601 sequences (a, x1, x2), each label drawn once from "
                "p_a over 0..50 ∈ {uniform, normal, Poisson λ = 10, exp(−5y)}; checkpoint at epoch 200; "
                f"{SPEC8_SETTINGS}"),
    runs=lambda: {law: _config(law)
                  for law in ("uniform", "normal", "poisson", "exp")},
    measure=measure_label_law, judge=judge_label_law, describe=describe_label_law, draw=draw_label_law,
    summary=summarise_label_law,
))

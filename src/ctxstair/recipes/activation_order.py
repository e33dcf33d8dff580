"""Activation order gates signature orders (SPEC §6.2 "Reachability", §8 F4): ``activation-order``.

    ctxstair run activation-order --out runs/activation-order        # N = 10: about 2 min on 2 CPU cores
    ctxstair run activation-order-n50 --out runs/activation-order-n50   # the paper's N = 50, L ≤ 3: ≈ 50 min

One part per (L, K), L ∈ {2, 3, 4}, K ∈ {1..6}: the CBOW model with σ(z) = z^K trained on all
N^L sequences of ``sum_mod`` (y = 1 + (Σ x_i) mod N). Expanding (Σ_i w_{x_i})^K, the model is a sum
of functions of at most K positions, so it reaches signatures of order at most K − 1 (SPEC §6.2);
the label of ``sum_mod`` is independent of any L − 1 of its tokens, so only the order-(L − 1)
signature tells tokens apart. Expected: learned iff K ≥ L, and collapsed embeddings when K < L.

Defaults, and why (docs/recipes.md has the measurements): N = 10, d = 128, small initialization
γ = 1, full-batch Adam lr 1e-2, 1000 epochs, 2 seeds per cell, no alignment analysis (the
conclusion reads metrics.jsonl and the last snapshot). From small initialization σ(h) ≈ h^K is
tiny for large K, so gradient descent (whose step scales with the gradient) leaves the K ≥ 4
cells on their plateau for the whole CPU budget, while Adam's per-coordinate normalisation does
not care about the scale.

Judging a cell: *learned* when every member's final training accuracy is ≥ 0.9; *not learned*
when every member's is ≤ 2 × chance (2/N); otherwise *undecided* (the rule is then not judged
for that cell). The embedding geometry is summarised by the effective rank (Roy & Vetterli 2007:
exp of the entropy of the normalised singular values, not centred) of the task tokens' embedding
rows at the last epoch; "collapsed" means at most 0.3 × its value at initialization (random rows:
≈ min(N, d), e.g. 9.9 for N = 10). Measured at the defaults: the rule holds in all 18 cells; the
K < L embeddings collapse for K = 1 and (L, K) = (4, 3) but not for K = 2 < L, whose order-0 drift
is proportional to each embedding itself (σ' odd) and keeps its random signs under Adam (under
gradient descent those cells collapse too, but there K ≥ 3 does not learn in the budget).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.alignment.geometry import effective_rank
from ctxstair.alignment.similarity import mean_cosine
from ctxstair.analysis import measures as ms
from ctxstair.config import AnalysisConfig, InitConfig, ModelConfig, RunConfig, SnapshotConfig, TaskConfig, TrainConfig
from ctxstair.recipes.base import Figures, KeyNumber, Paper, TrainedRecipe, register
from ctxstair.report import activation_figures
from ctxstair.report.formats import fmt
from ctxstair.run import Run

LENGTHS = (2, 3, 4)
POWERS = (1, 2, 3, 4, 5, 6)
DEFAULT_N = 10
#: A cell is "learned" when every member's final training accuracy is at least this.
LEARNED_ACC = 0.9
#: A cell is "not learned" when every member's final accuracy is at most this multiple of chance (1/N).
NOT_LEARNED_CHANCE = 2.0
#: Embeddings are "collapsed" when the effective rank of the task tokens' rows at the end is at most
#: this fraction of its value at initialization (random rows: ≈ min(N, d)).
COLLAPSED_FRACTION = 0.3
#: SPEC §8 F4, reproduced by two recipes (at a smaller N, and at the paper's).
PAPER_F4 = Paper("the activation's order gates the signature orders: learned iff K ≥ L; collapsed embeddings when "
                 "K < L",
                 "σ = z^K, K ∈ 1..6, L ∈ {2, 3, 4}, y = 1 + (Σ x_i) mod N, N = 50, all N^L sequences, 1000 epochs; "
                 "CBOW, d = 128, small init")


def part_name(L: int, K: int) -> str:
    """The part (run directory) of one cell: ``L2-K3``."""
    return f"L{L}-K{K}"


def _config(L: int, K: int, recipe: str = "activation-order", N: int = DEFAULT_N, epochs: int = 1000) -> RunConfig:
    return RunConfig(
        recipe=recipe, task=TaskConfig("sum_mod", {"N": N, "L": L}),
        model=ModelConfig(d=128, activation="monomial", power=K, init=InitConfig(gamma=1.0)),
        train=TrainConfig(optimizer="adam", lr=1e-2, epochs=epochs, members=2),
        snapshots=SnapshotConfig(log_points=16, every=100),
        analysis=AnalysisConfig(enabled=False),
    )


def cell_measures(run: Path) -> dict:
    """Numbers of one (L, K) run read from its files (SPEC §8 F4).

    Returns L, K, N, chance (1/N), per member (lists of length M): final training ``acc`` and
    ``loss``, ``erank`` = effective rank of W_E[tokens] (N, d) at the last snapshot, ``erank_init``
    at epoch 0, ``mean_cos`` = mean pairwise cosine of those rows at the last snapshot, and
    ``learned_epoch`` = first epoch with accuracy ≥ LEARNED_ACC (None if never); plus ``verdict``
    ('learned', 'not learned', 'undecided'), ``expected`` (K ≥ L), ``holds`` (None if undecided) and
    ``collapsed`` (every member's erank ≤ COLLAPSED_FRACTION × its erank_init).
    """
    cfg = Run(run).config
    L, K, N = int(cfg.task.params["L"]), int(cfg.model.power), int(cfg.task.params["N"])
    tokens = rundir.read_signatures(run).tokens
    epochs = rundir.snapshot_times(run)
    first, last = rundir.load_snapshot(run, epochs[0])["W_E"], rundir.load_snapshot(run, epochs[-1])["W_E"]
    acc, loss, erank, erank_init, mean_cos, learned_epoch = [], [], [], [], [], []
    for m in ms.members(run):
        e_acc, a = ms.metric_series(run, m, "acc")
        _, lo = ms.metric_series(run, m, "loss")
        acc.append(float(a[-1]))
        loss.append(float(lo[-1]))
        learned_epoch.append(ms.learned_epoch(e_acc, a, LEARNED_ACC))
        rows = last[m][tokens].astype(np.float64)
        erank.append(effective_rank(rows))
        erank_init.append(effective_rank(first[m][tokens].astype(np.float64)))
        mean_cos.append(mean_cosine(rows))
    chance = ms.chance_accuracy(run)
    if min(acc) >= LEARNED_ACC:
        verdict = "learned"
    elif max(acc) <= NOT_LEARNED_CHANCE * chance:
        verdict = "not learned"
    else:
        verdict = "undecided"
    expected = K >= L
    holds = None if verdict == "undecided" else (verdict == "learned") == expected
    collapsed = all(r <= COLLAPSED_FRACTION * r0 for r, r0 in zip(erank, erank_init))
    return dict(L=L, K=K, N=N, chance=chance, epochs=int(epochs[-1]), acc=acc, loss=loss, erank=erank,
                erank_init=erank_init, mean_cos=mean_cos, learned_epoch=learned_epoch, verdict=verdict,
                expected=expected, holds=holds, collapsed=collapsed)


def measure(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of an activation-order recipe: part -> :func:`cell_measures` (``cells``), the L and K
    values, N, which cells were judged, held, undecided or failed, the K < L cells (``below``) and
    which of them did not collapse, the smallest effective rank of a K ≥ L cell and the median one at
    initialization."""
    cells = {part: cell_measures(run) for part, run in paths.items()}
    below = {part: c for part, c in cells.items() if not c["expected"]}
    judged = [c for c in cells.values() if c["holds"] is not None]
    return dict(cells=cells, Ls=sorted({c["L"] for c in cells.values()}), Ks=sorted({c["K"] for c in cells.values()}),
                N=next(iter(cells.values()))["N"], judged=judged, held=[c for c in judged if c["holds"]],
                undecided=[part for part, c in cells.items() if c["holds"] is None],
                failed=[part for part, c in cells.items() if c["holds"] is False], below=below,
                not_collapsed=[part for part, c in below.items() if not c["collapsed"]],
                rank_above=min((min(c["erank"]) for c in cells.values() if c["expected"]), default=float("nan")),
                rank_init=float(np.median([r for c in cells.values() for r in c["erank_init"]])))


def judge(n: dict) -> list[KeyNumber]:
    """The rule, the collapse and one key number per cell, from :func:`measure`."""
    cells, judged, held, undecided, failed = n["cells"], n["judged"], n["held"], n["undecided"], n["failed"]
    below, not_collapsed = n["below"], n["not_collapsed"]
    exceptions = ", ".join(f"{part} ({_span(below[part]['erank'], 2)})" for part in not_collapsed)
    return [
        KeyNumber("rule: learned iff K ≥ L", f"holds in {len(held)} of {len(judged)} judged cells"
                  + (f"; undecided: {', '.join(undecided)}" if undecided else "")
                  + (f"; fails: {', '.join(failed)}" if failed else ""),
                  f"holds in every cell (learned: all members ≥ {LEARNED_ACC:g}; not learned: all ≤ "
                  f"{NOT_LEARNED_CHANCE:g} × chance)", bool(judged) and len(held) == len(cells)),
        KeyNumber("collapsed embeddings when K < L (effective rank of W_E[tokens] at the end)",
                  f"collapsed in {len(below) - len(not_collapsed)} of {len(below)} K < L cells"
                  + (f"; not in {exceptions}" if not_collapsed else "")
                  + f"; K ≥ L cells ≥ {fmt(n['rank_above'], 2)}; random rows at epoch 0: "
                  f"{fmt(n['rank_init'], 2)}",
                  f"every K < L cell collapsed (≤ {COLLAPSED_FRACTION:g} × its effective rank at epoch 0)",
                  not not_collapsed if below else None),
        *(_cell_key(c) for c in cells.values()),
    ]


def _cell_key(c: dict) -> KeyNumber:
    """The key number of one (L, K) cell of :func:`cell_measures`."""
    relation = "K ≥ L" if c["expected"] else "K < L"
    return KeyNumber(
        f"L = {c['L']}, K = {c['K']} ({relation}): final training accuracy",
        f"{_span(c['acc'])} → {c['verdict']}; effective rank {_span(c['erank'], 2)}"
        f"{' (collapsed)' if c['collapsed'] else ''}, mean cosine {_span(c['mean_cos'], 2)}"
        + (f"; ≥ {LEARNED_ACC:g} first at epoch {_span_int(c['learned_epoch'])}"
           if c["verdict"] == "learned" else ""),
        (f"learned (every member ≥ {LEARNED_ACC:g})" if c["expected"]
         else f"not learned (every member ≤ {NOT_LEARNED_CHANCE:g} × chance = {NOT_LEARNED_CHANCE / c['N']:.3g})"),
        c["holds"])


def describe(n: dict) -> str:
    """The paragraph of an activation-order recipe from :func:`measure`."""
    cells, judged, held, undecided, failed = n["cells"], n["judged"], n["held"], n["undecided"], n["failed"]
    below, not_collapsed = n["below"], n["not_collapsed"]
    return (
        f"With σ(z) = z^K the CBOW model is a sum of functions of at most K positions, so it can use signatures "
        f"of order at most K − 1, while y = 1 + (Σ x_i) mod N (N = {n['N']}) is independent of any L − 1 of the L "
        f"tokens. Of {len(cells)} cells, {len(judged)} could be judged (learned: every seed ≥ {LEARNED_ACC:g} "
        f"final training accuracy; not learned: every seed ≤ {NOT_LEARNED_CHANCE:g} × chance) and the rule "
        f"'learned iff K ≥ L' holds in {len(held)} of them"
        + (f"; undecided: {', '.join(undecided)}" if undecided else "")
        + (f"; it fails in {', '.join(failed)}" if failed else "")
        + f". Where K < L the embeddings collapse (effective rank ≤ {COLLAPSED_FRACTION:g} × its initial "
        f"{fmt(n['rank_init'], 2)}) in {len(below) - len(not_collapsed)} of {len(below)} cells"
        + (f" (not in {', '.join(not_collapsed)})" if not_collapsed else "")
        + f"; where K ≥ L the effective rank stays at least {fmt(n['rank_above'], 2)}."
        + (" The cells that do not collapse have even K: σ'(h) = K h^(K−1) is then odd, so each embedding's own "
           "order-0 drift is proportional to itself and, under Adam's per-coordinate steps, keeps its random "
           "signs (docs/recipes.md: under gradient descent these cells collapse too)."
           if not_collapsed and all(below[part]["K"] % 2 == 0 for part in not_collapsed) else "")
    )


def draw(paths: dict[str, Path], n: dict) -> Figures:
    """Accuracy and effective rank over (L, K), and the accuracy curves."""
    cells, Ls, Ks = n["cells"], n["Ls"], n["Ks"]
    return {
        "accuracy.png": ("Final training accuracy over (L, K) (median over seeds; chance = 1/N). "
                         "Cells right of the staircase line have K ≥ L.",
                         activation_figures.cell_heatmap(cells, Ls, Ks, "acc", "final training accuracy",
                                                         vmin=0.0, vmax=1.0, cmap="viridis")),
        "effective_rank.png": ("Effective rank of the task tokens' embeddings at the end over (L, K) (median over "
                               "seeds): low = collapsed.",
                               activation_figures.cell_heatmap(cells, Ls, Ks, "erank", "effective rank of W_E[tokens]",
                                                               vmin=1.0, vmax=float(min(n["N"], 128)),
                                                               cmap="magma")),
        "curves.png": ("Training accuracy over epochs, one panel per L, one line per K (median over seeds).",
                       activation_figures.accuracy_curves(paths, cells, Ls)),
    }


def summarise(n: dict) -> dict:
    """``summary.json``: N, the thresholds and every cell's numbers."""
    return {"N": n["N"], "learned_acc": LEARNED_ACC, "not_learned_chance": NOT_LEARNED_CHANCE,
            "collapsed_fraction": COLLAPSED_FRACTION, "cells": n["cells"]}


def _span(values: list[float], digits: int = 3) -> str:
    """'0.512' for one member or equal values, '0.100–0.118' (or '-0.08 to 0.02') for a range over members."""
    lo, hi = fmt(min(values), digits), fmt(max(values), digits)
    return lo if lo == hi else f"{lo} to {hi}" if min(values) < 0 else f"{lo}–{hi}"


def _span_int(values: list[int | None]) -> str:
    """'120' for one member or equal epochs, '120–180' for a range; 'n/a' when no member got there."""
    known = [v for v in values if v is not None]
    if not known:
        return "n/a"
    return str(min(known)) if min(known) == max(known) else f"{min(known)}–{max(known)}"


register(TrainedRecipe(
    name="activation-order", figure="SPEC §8 F4",
    expectation="σ = z^K, y = 1 + (Σ x_i) mod N: learned iff K ≥ L; "
                "collapsed embeddings (low effective rank) when K < L",
    cpu_time="≈ 2 min",
    runs=lambda: {part_name(L, K): _config(L, K) for L in LENGTHS for K in POWERS},
    paper=PAPER_F4,
    measure=measure, judge=judge, describe=describe, draw=draw, summary=summarise,
))

#: The paper's N for F4. All N^L sequences: 2,500 for L = 2, 125,000 for L = 3 (0.8 s per full-batch
#: epoch of 2 seeds on one core), 6.25 M for L = 4 (not run: hours per cell and ≈ 6 GB per activation).
PAPER_N = 50
#: Epochs of the L = 3 cells at N = 50 but K = 6: the paper's 1000 take ≈ 14 min per cell on one
#: core, and K = 3..5 learn by epoch ≈ 175 (docs/recipes.md). K = 6 gets the paper's 1000: a higher
#: power leaves the plateau later (L = 2, K = 6 needs ≈ 520 epochs at N = 50).
PAPER_N_L3_EPOCHS = 400


def _n50_epochs(L: int, K: int) -> int:
    """Epochs of cell (L, K) of ``activation-order-n50``: the paper's 1000, but PAPER_N_L3_EPOCHS for L = 3, K < 6."""
    return PAPER_N_L3_EPOCHS if L == 3 and K < 6 else 1000


register(TrainedRecipe(
    name="activation-order-n50", figure="SPEC §8 F4 (N = 50)",
    expectation="the F4 rule at the paper's N = 50 for L = 2, 3: learned iff K ≥ L; "
                "collapsed embeddings (low effective rank) when K < L",
    cpu_time="≈ 50 min (L = 3: 125,000 sequences, 400 epochs; 1000 for K = 6)",
    runs=lambda: {part_name(L, K): _config(L, K, "activation-order-n50", PAPER_N, _n50_epochs(L, K))
                  for L in (2, 3) for K in POWERS},
    paper=PAPER_F4,
    measure=measure, judge=judge, describe=describe, draw=draw, summary=summarise,
))

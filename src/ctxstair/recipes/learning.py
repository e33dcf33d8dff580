"""What signature alignment does for learning (SPEC §8 F8a, F9, App. D).

    ctxstair run ffn-vs-attention --out runs/ffn-vs-attention    # F8a, about 40 s on 2 CPU cores
    ctxstair run modulus-onset --out runs/modulus-onset          # F9, about 2.5 min (--seeds K)
    ctxstair run seed-spectra --out runs/seed-spectra            # App. D (add and mod), about 1 min

Defaults, and why (docs/recipes.md has the measurements):

* ``ffn-vs-attention``: ``mod`` (y = (x1 + x2 + 1) mod N), N = 40, two parts trained identically —
  full-batch Adam lr 1e-2, γ = 1, 3000 epochs: ``cbow`` (the CBOW model with tanh, as
  ``staircase-mod``: with ReLU the embeddings never become collinear and there is no plateau to
  leave) and ``attention`` (the attention-only model of ``attention-arith``, d_k = 64). Adam lr
  1e-2 is the setting of both ``staircase-mod`` and ``attention-arith``. The paper trains 1000
  epochs; at this optimiser the attention-only model is then still on its plateau (loss ln N,
  probe −0.14) and leaves it between epochs 900 and 2100 depending on the seed, so the default is
  3000 (``--set train.epochs=1000`` for the paper's length). Snapshots are dense up to epoch 200
  (where CBOW learns) and every 200 epochs after.
* ``modulus-onset``: ``modsum`` (y = (x1 + x2) mod M over all N² pairs), N = 20, one part per
  M = 2..20 with 3 seeds each, the CBOW model with tanh, full-batch gradient descent lr 2 (the
  discrete gradient flow, as ``staircase-add``), γ = 1, a cap of 5000 epochs, no alignment
  analysis (the conclusion reads ``metrics.jsonl`` and ``signatures.npz``). With ReLU (gradient
  descent or Adam) M | N is not slower at all, and with tanh under Adam the two groups differ by
  less than 3× (docs/recipes.md).
* ``seed-spectra``: two parts, ``add`` and ``mod`` (the paper shows both), each its staircase
  recipe's configuration (``staircase-add``: ReLU, GD lr 2; ``staircase-mod``: tanh, Adam lr 1e-2;
  γ = 1, N = 40) with 10 ensemble members to epoch 1000, snapshots only at 0 and 1000 (the Fourier
  profile is read at the last one). Next to the Fourier alignment that defines k*, the report gives
  it with the order-0 structure partialled out (SPEC §3 "Separating the orders"): every ``add``
  seed's S^emb is dominated by the order-0 band that all seeds share (on ``mod`` the order-0
  signatures are all equal, so there is nothing to partial out and the two numbers coincide). Two
  chance levels say what "a different frequency per seed" is worth: the number of distinct values
  that random draws from the candidate frequencies give, and, per seed, a permutation null of the
  best alignment (the same maximum over k with the tokens relabelled).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.alignment import compare, cosine_matrix, fourier_signatures, partial_correlation, signature_cosine
from ctxstair.alignment.similarity import permuted_partial_correlation, permuted_pearson
from ctxstair.analysis import measures as ms
from ctxstair.analysis.measures import LEARNED_ACC
from ctxstair.config import (
    AnalysisConfig,
    InitConfig,
    ModelConfig,
    RunConfig,
    SnapshotConfig,
    TaskConfig,
    TrainConfig,
)
from ctxstair.errors import InputError
from ctxstair.recipes.base import SPEC8_SETTINGS, Figures, KeyNumber, Paper, TrainedRecipe, get, register
from ctxstair.report import learning_figures
from ctxstair.report.formats import fmt, fmt_epochs
from ctxstair.run import Run

#: The learning threshold (:data:`ctxstair.analysis.measures.LEARNED_ACC`) as report text: "95 %".
LEARNED = f"{LEARNED_ACC * 100:g} %"
#: Held-out order-1 probe at which the embeddings count as aligned with order 1 (as attention-arith).
ALIGNED_PROBE = 0.5
#: App. D: k* = argmax over k > 10 of the Fourier alignment.
SPECTRA_K_MIN = 11
#: Token permutations of the chance level of a seed's best Fourier alignment (a p-value's resolution: 1/201).
SPECTRA_PERMUTATIONS = 200
#: A seed's k* counts as a real match when its best alignment beats the permutation null at this level.
SPECTRA_ALPHA = 0.05
#: F9: the median onset for M | N must be at least this multiple of the median for the other M.
ONSET_RATIO = 3.0


# ------------------------------------------------------------------------------ ffn-vs-attention (F8a)

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


# --------------------------------------------------------------------------------- modulus-onset (F9)

ONSET_MODULI = tuple(range(2, 21))


def onset_part(M: int) -> str:
    """The part (run directory) of one modulus: ``M07``."""
    return f"M{M:02d}"


def _onset_config(M: int) -> RunConfig:
    epochs = 5000
    return RunConfig(recipe="modulus-onset", task=TaskConfig("modsum", {"N": 20, "M": M}),
                     model=ModelConfig(d=128, activation="tanh", init=InitConfig(gamma=1.0)),
                     train=TrainConfig(optimizer="gd", lr=2.0, epochs=epochs, members=3),
                     snapshots=SnapshotConfig(log_points=0, every=epochs), analysis=AnalysisConfig(enabled=False))


def onset_rows(paths: dict[str, Path]) -> tuple[list[dict], int, int]:
    """One row per (M, seed): ``M``, ``seed``, ``onset_epoch`` (first epoch with training accuracy
    ≥ LEARNED_ACC; None if never within the run = censored), ``M_divides_N``, ``final_accuracy``;
    and N and the cap (last epoch), read from the parts' ``config.yaml`` and ``metrics.jsonl``."""
    rows, caps, Ns = [], set(), set()
    for run in paths.values():
        cfg = Run(run).config
        M, N = int(cfg.task.params["M"]), int(cfg.task.params["N"])
        Ns.add(N)
        for m, seed in zip(ms.members(run), ms.member_seeds(run)):
            epochs, acc = ms.metric_series(run, m, "acc")
            caps.add(int(epochs[-1]))
            rows.append(dict(M=M, seed=seed, onset_epoch=ms.learned_epoch(epochs, acc),
                             M_divides_N=N % M == 0, final_accuracy=float(acc[-1])))
    if len(caps) != 1 or len(Ns) != 1:
        raise InputError(f"the parts of {Path(next(iter(paths.values()))).parent} differ in epochs {sorted(caps)} "
                         f"or N {sorted(Ns)}: the onsets cannot be compared")
    return rows, Ns.pop(), caps.pop()


def censored_median(onsets: list[int | None], cap: int) -> tuple[float, bool]:
    """(median, lower_bound): the median onset with censored runs (None) counted as ``cap``, and
    whether it is only a lower bound (the median would grow if the censored runs took longer)."""
    median = float(np.median(np.array([cap if o is None else o for o in onsets], dtype=float)))
    return median, bool(ms.median_onset(onsets) != median)


def onset_rule(rows: list[dict], cap: int) -> dict:
    """The F9 rule from the rows: medians for M | N and for the other M (censored = cap), their
    ratio, and ``met``: True/False when the ratio is determined (or a lower bound ≥ ONSET_RATIO),
    None when censoring leaves it open."""
    div, other = ([r["onset_epoch"] for r in rows if r["M_divides_N"] == flag] for flag in (True, False))
    (m_div, bound_div), (m_other, bound_other) = censored_median(div, cap), censored_median(other, cap)
    ratio = m_div / m_other
    if bound_other:
        met = None  # the other M's median is itself censored: the ratio is not determined
    elif bound_div:
        met = True if ratio >= ONSET_RATIO else None  # a lower bound: only "met" can be concluded
    else:
        met = ratio >= ONSET_RATIO
    return dict(median_divides=m_div, median_divides_bound=bound_div, median_other=m_other,
                median_other_bound=bound_other, ratio=ratio, met=met, n_divides=len(div), n_other=len(other),
                censored=sum(o is None for o in div + other))


def _median_text(median: float, bound: bool) -> str:
    """A median onset for a report, '≥ ' in front when it is only a lower bound."""
    return f"{'≥ ' if bound else ''}{median:.0f}"


def measure_onset(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of ``modulus-onset``: the rows (:func:`onset_rows`), N, the cap, the rule
    (:func:`onset_rule`), the moduli that divide N and the others, the range of onsets of each group
    (``spread``, censored runs at the cap; None for an empty group), the slowest run with M ∤ N and the
    fastest with M | N that learned (None if none), and the censored median per M (``per_M``)."""
    rows, N, cap = onset_rows(paths)
    Ms = sorted({r["M"] for r in rows})
    spread = {}
    for flag in (True, False):
        values = [cap if r["onset_epoch"] is None else r["onset_epoch"] for r in rows if r["M_divides_N"] == flag]
        spread[flag] = (min(values), max(values)) if values else None
    reached = [r for r in rows if r["onset_epoch"] is not None]
    return dict(rows=rows, N=N, cap=cap, rule=onset_rule(rows, cap), divisors=[M for M in Ms if N % M == 0],
                others=[M for M in Ms if N % M], spread=spread,
                slowest_other=max((r for r in reached if not r["M_divides_N"]), key=lambda r: r["onset_epoch"],
                                  default=None),
                fastest_div=min((r for r in reached if r["M_divides_N"]), key=lambda r: r["onset_epoch"], default=None),
                per_M={M: censored_median([r["onset_epoch"] for r in rows if r["M"] == M], cap) for M in Ms})


def _ratio_text(rule: dict) -> str:
    """The ratio of the two median onsets for a report: '≥ ' when only a lower bound, and why when open."""
    return (f"{'≥ ' if rule['median_divides_bound'] and not rule['median_other_bound'] else ''}"
            f"{rule['ratio']:.1f}×" + (" (not determined: the median for the other M is censored)"
                                       if rule["median_other_bound"] else ""))


def _spread_text(spread: tuple[int, int] | None) -> str:
    return f"{spread[0]}–{spread[1]}" if spread else "n/a"


def judge_onset(n: dict) -> list[KeyNumber]:
    """The key numbers of ``modulus-onset`` from :func:`measure_onset`."""
    rule, slowest_other, fastest_div = n["rule"], n["slowest_other"], n["fastest_div"]
    return [
        KeyNumber(f"median onset for M | N (M = {', '.join(map(str, n['divisors']))}; {rule['n_divides']} runs)",
                  f"{_median_text(rule['median_divides'], rule['median_divides_bound'])} epochs (runs: "
                  f"{_spread_text(n['spread'][True])})",
                  "thousands of epochs (the paper's M | N: 4, 5, 10, 20)", None),
        KeyNumber(f"median onset for the other M ({len(n['others'])} moduli; {rule['n_other']} runs)",
                  f"{_median_text(rule['median_other'], rule['median_other_bound'])} epochs (runs: "
                  f"{_spread_text(n['spread'][False])})",
                  "a few hundred epochs", None),
        KeyNumber("ratio of the two medians (M | N over the other M)", _ratio_text(rule),
                  f"≥ {ONSET_RATIO:g}×: the paper's thousands of epochs against a few hundred, as a ratio of medians",
                  rule["met"]),
        KeyNumber(f"censored runs (accuracy never ≥ {LEARNED} within the cap of {n['cap']} epochs)",
                  f"{rule['censored']} of {len(n['rows'])}", "counted as ≥ the cap in the medians", None),
        KeyNumber("slowest run with M ∤ N vs fastest run with M | N",
                  (f"M = {slowest_other['M']} at epoch {slowest_other['onset_epoch']}" if slowest_other else "none")
                  + " vs "
                  + (f"M = {fastest_div['M']} at epoch {fastest_div['onset_epoch']}" if fastest_div else "none"),
                  "not asserted: whether the two groups overlap at all", None),
    ]


def describe_onset(n: dict) -> str:
    """The paragraph of ``modulus-onset`` from :func:`measure_onset`."""
    rule, divisors = n["rule"], n["divisors"]
    return (
        f"y = (x1 + x2) mod M over all pairs of 1..{n['N']}. When M divides N every number is followed by every "
        f"residue equally often, so all order-0 label signatures are equal (their similarity heatmaps are constant) "
        f"and the first, order-0 stage of the staircase cannot tell the tokens apart; otherwise the order-0 "
        f"signatures already separate the residues. The median first epoch with training accuracy ≥ {LEARNED} is "
        f"{_median_text(rule['median_divides'], rule['median_divides_bound'])} for M | N "
        f"(M = {', '.join(map(str, divisors))}) against "
        f"{_median_text(rule['median_other'], rule['median_other_bound'])} "
        f"for the other M: a ratio of {_ratio_text(rule)} (expected ≥ {ONSET_RATIO:g}×). "
        f"{rule['censored']} of {len(n['rows'])} runs did not reach {LEARNED} within the cap of {n['cap']} epochs "
        f"(censored, counted as ≥ the cap)."
        + (" M = 2 divides N too and is slow like the other divisors (the paper's list for N = 20 is 4, 5, 10, 20)."
           if 2 in divisors
           and n["per_M"][2][0] >= ONSET_RATIO * rule["median_other"] else "")
    )


def draw_onset(paths: dict[str, Path], n: dict) -> Figures:
    """The onsets against M, and each part's order-0 signature similarity."""
    N, per_M = n["N"], n["per_M"]
    tokens = rundir.read_signatures(next(iter(paths.values()))).tokens
    panels = []
    for run in paths.values():
        M = int(Run(run).config.task.params["M"])
        median, bound = per_M[M]
        panels.append((f"M = {M}{' (M | N)' if N % M == 0 else ''}\nmedian onset {_median_text(median, bound)}",
                       signature_cosine(rundir.read_signatures(run).orders[0])))
    return {
        "onset.png": (f"First epoch with training accuracy ≥ {LEARNED} against M (one point per seed; "
                      "M | N shaded; open triangles: censored at the cap).",
                      learning_figures.onset_figure(n["rows"], N, n["cap"], LEARNED_ACC)),
        "order0.png": ("Order-0 signature similarity S^sig,(0) of the tokens 1..N for each M, from each part's "
                       "signatures.npz, each panel stretched over its own range: constant (all 1) when M | N.",
                       learning_figures.similarity_grid(panels, tokens, "Order-0 label-signature similarity "
                                                        "$S^{\\mathrm{sig},(0)}$ per modulus M\n(cosine over token "
                                                        "pairs; each panel on its own colour range)", per_panel=True)),
    }


def summarise_onset(n: dict) -> dict:
    """``summary.json`` of ``modulus-onset``: N, the cap, the threshold, the rule and the median per M."""
    return {"N": n["N"], "cap": n["cap"], "learned_acc": LEARNED_ACC, "rule": n["rule"],
            "median_onset_per_M": {str(M): {"median": v[0], "lower_bound": v[1]} for M, v in n["per_M"].items()}}


register(TrainedRecipe(
    name="modulus-onset", figure="SPEC §8 F9",
    expectation="y = (x1 + x2) mod M, N = 20: onset (first epoch with accuracy ≥ 95 %) in the thousands when "
                "M | N, a few hundred otherwise; median for M | N ≥ 3× the median for the other M",
    cpu_time="≈ 2.5 min (19 moduli × 3 seeds × 5000 epochs)",
    paper=Paper("order-0 informativeness sets the onset: train acc ≥ 95 % after thousands of epochs "
                "when M | N (4, 5, 10, 20), a few hundred otherwise",
                f"y = (x1 + x2) mod M, N = 20, a range of M; {SPEC8_SETTINGS}"),
    runs=lambda: {onset_part(M): _onset_config(M) for M in ONSET_MODULI},
    measure=measure_onset, judge=judge_onset, describe=describe_onset, draw=draw_onset, summary=summarise_onset,
    member_rows=lambda n: n["rows"],
))


# ------------------------------------------------------------------------------ seed-spectra (App. D)

def _spectra_config(source: str) -> RunConfig:
    """Recipe ``source``'s configuration with 10 members to epoch 1000, snapshots at 0 and 1000."""
    cfg = get(source).runs()[""]
    return dataclasses.replace(cfg, recipe="seed-spectra",
                               train=dataclasses.replace(cfg.train, epochs=1000, members=10),
                               snapshots=SnapshotConfig(log_points=0, every=1000))


#: The parts of ``seed-spectra``: task -> the staircase recipe whose configuration it uses.
SPECTRA_PARTS = {"add": "staircase-add", "mod": "staircase-mod"}


def _pairs(values: list[float]) -> str:
    """'mean (min to max)' of a list of correlations."""
    return f"{fmt(float(np.mean(values)))} ({fmt(min(values))} to {fmt(max(values))})" if values else "n/a"


def _partial(S_emb: object, S_1: object, S0: np.ndarray) -> np.ndarray:
    """Pearson of ``S_emb`` with ``S_1`` controlling for ``S0``; the plain Pearson when ``S0`` is constant
    (all order-0 signatures equal): controlling for a constant removes nothing."""
    if not compare(S0, S0)["defined"]:
        return np.asarray(compare(S_emb, S_1)["pearson"])
    return np.asarray(partial_correlation(S_emb, S_1, S0))


def _permuted_partial(S_emb: np.ndarray, S_1: np.ndarray, S0: np.ndarray, permutations: np.ndarray) -> np.ndarray:
    """:func:`_partial` of ``S_emb[π][:, π]`` with ``S_1`` controlling for ``S0``, for each permutation π (P,)."""
    if not compare(S0, S0)["defined"]:
        return permuted_pearson(S_emb, S_1, permutations)
    return permuted_partial_correlation(S_emb, S_1, S0, permutations)


def _spectra_seeds(run: Path, last: int, sigs, S: list[np.ndarray], S0: np.ndarray) -> list[dict]:
    """Per seed: k*, the Fourier alignment at k* (plain and with S^sig,(0) partialled out), each with
    its permutation p-value, and the training accuracy, at epoch ``last``; ``S``: the seeds' S^emb."""
    members = ms.members(run)
    # S^sig,(1)(c_k) for every k of alignment.csv, to repeat the Fourier alignment with the shared
    # order-0 structure partialled out (SPEC §3 "Separating the orders")
    ks = ms.fourier_profile(run, members[0], last)[0]
    S_k = np.stack([signature_cosine(h) for h in fourier_signatures(sigs.orders[1], ks)])
    # Chance level of "the best frequency": the same maximum over k > SPECTRA_K_MIN - 1, with the seed's
    # tokens relabelled at random (the same permutations for every seed).
    rng = np.random.default_rng(0)
    permutations = np.stack([rng.permutation(sigs.tokens.size) for _ in range(SPECTRA_PERMUTATIONS)])
    per = []
    for m, seed in zip(members, ms.member_seeds(run)):
        ks, r = ms.fourier_profile(run, m, last)
        k_star, r_star = ms.best_frequency(ks, r, k_min=SPECTRA_K_MIN)
        partial = _partial(S[m], S_k, S0)
        searched = np.flatnonzero(ks >= SPECTRA_K_MIN)
        null = np.max([permuted_pearson(S[m], S_k[i], permutations) for i in searched], axis=0)
        p_value = float((1 + np.sum(null >= r_star)) / (1 + SPECTRA_PERMUTATIONS))
        # The partialled alignment at k* against the best partialled alignment over k with the tokens
        # relabelled: conservative, since k* was chosen by the plain r, not by the partialled one.
        partial_star = float(partial[ks == k_star][0])
        partial_null = np.max([_permuted_partial(S[m], S_k[i], S0, permutations) for i in searched], axis=0)
        partial_p = float((1 + np.sum(partial_null >= partial_star)) / (1 + SPECTRA_PERMUTATIONS))
        per.append(dict(seed=seed, k_star=k_star, r_star=r_star, partial_r_star=partial_star,
                        null_p=p_value, null_q95=float(np.quantile(null, 0.95)), partial_null_p=partial_p,
                        accuracy=float(ms.metric_series(run, m, "acc")[1][-1]), ks=ks.tolist(), r=r.tolist(),
                        partial=partial.tolist()))
    return per


def spectra_numbers(run: Path) -> dict:
    """The numbers of one part of ``seed-spectra`` at its last snapshot (``last``): per seed
    (``per``, :func:`_spectra_seeds`), the seeds' S^emb (``S``) and the task tokens, the number of
    candidate frequencies (``n_k``) and the distinct values random draws from them would give
    (``chance_distinct``), the seeds beating the permutation null (plain, partialled), the Pearson of
    every pair of seeds' S^emb (plain and controlling for S^sig,(0)), the seeds per k*
    (``by_k``) and the alignment at k* per seed (plain, partialled)."""
    last = rundir.snapshot_times(run)[-1]
    sigs = rundir.read_signatures(run)
    S = [cosine_matrix(w) for w in rundir.load_snapshot(run, last)["W_E"][:, sigs.tokens].astype(np.float64)]
    S0 = signature_cosine(sigs.orders[0])
    per = _spectra_seeds(run, last, sigs, S, S0)
    n_k = int(np.sum(np.asarray(per[0]["ks"]) >= SPECTRA_K_MIN))
    pairs = [(i, j) for i in range(len(S)) for j in range(i + 1, len(S))]
    return dict(
        last=last, per=per, S=S, tokens=sigs.tokens, n_k=n_k,
        # Distinct values among len(per) independent uniform draws from n_k frequencies, on average.
        chance_distinct=n_k * (1 - (1 - 1 / n_k) ** len(per)),
        beating=sum(p["null_p"] < SPECTRA_ALPHA for p in per),
        partial_beating=sum(p["partial_null_p"] < SPECTRA_ALPHA for p in per), pairs=pairs,
        between=[float(compare(S[i], S[j])["pearson"]) for i, j in pairs],
        between_partial=[float(_partial(S[i], S[j], S0)) for i, j in pairs],
        by_k={k: [p["seed"] for p in per if p["k_star"] == k] for k in sorted({p["k_star"] for p in per})},
        r_stars=[p["r_star"] for p in per], partial_stars=[p["partial_r_star"] for p in per])


def _shared_text(by_k: dict[int, list[int]]) -> str:
    """The frequencies that more than one seed share, with their seeds: 'k = 13 for seeds 2, 7'."""
    return "; ".join(f"k = {k} for seeds {', '.join(map(str, seeds))}" for k, seeds in by_k.items() if len(seeds) > 1)


def _judge_spectra_part(task: str, n: dict) -> list[KeyNumber]:
    """The key numbers of one part of ``seed-spectra`` (named ``task: ...``) from :func:`spectra_numbers`."""
    last, per, by_k, n_k, pairs = n["last"], n["per"], n["by_k"], n["n_k"], n["pairs"]
    r_stars, partial_stars, shared = n["r_stars"], n["partial_stars"], _shared_text(n["by_k"])
    return [
        KeyNumber(f"{task}: k* = argmax over k > {SPECTRA_K_MIN - 1} of the Fourier alignment at epoch {last}, per "
                  f"seed (r; r controlling for S^sig,(0))",
                  "; ".join(f"seed {p['seed']}: {p['k_star']} ({fmt(p['r_star'], 2)}; "
                            f"{fmt(p['partial_r_star'], 2)})" for p in per),
                  "each seed best matched by its own frequency", None),
        KeyNumber(f"{task}: distinct k* over the seeds", f"{len(by_k)} of {len(per)} ({', '.join(map(str, by_k))})"
                  + (f"; shared: {shared}" if shared else "")
                  + f"; {n['chance_distinct']:.1f} on average if each seed's k* were drawn at random from the {n_k} "
                  "frequencies",
                  f"a different frequency for every seed: {len(per)} of {len(per)}", len(by_k) == len(per)),
        KeyNumber(f"{task}: k* above chance: the best alignment over k > {SPECTRA_K_MIN - 1} against the same maximum "
                  f"with the tokens relabelled ({SPECTRA_PERMUTATIONS} permutations), p per seed",
                  "; ".join(f"seed {p['seed']}: p = {p['null_p']:.3f} (r {fmt(p['r_star'], 2)} vs 95 % of chance "
                            f"{fmt(p['null_q95'], 2)})" for p in per) + f"; {n['beating']} of {len(per)} below "
                  f"{SPECTRA_ALPHA}",
                  f"every seed's k* a real match (p < {SPECTRA_ALPHA})", n["beating"] == len(per)),
        KeyNumber(f"{task}: Fourier alignment at k*: Pearson r, and r controlling for S^sig,(0) (median, range over "
                  f"seeds; seeds whose partialled r beats the best partialled r over k > {SPECTRA_K_MIN - 1} with the "
                  "tokens relabelled)",
                  f"{fmt(ms.median(r_stars))} ({fmt(min(r_stars))} to {fmt(max(r_stars))}); "
                  f"{fmt(ms.median(partial_stars))} ({fmt(min(partial_stars))} to {fmt(max(partial_stars))}); "
                  f"{n['partial_beating']} of {len(per)} above chance (p < {SPECTRA_ALPHA}: "
                  f"{', '.join(str(p['seed']) for p in per if p['partial_null_p'] < SPECTRA_ALPHA) or 'none'})",
                  "not asserted: how well k* matches", None),
        KeyNumber(f"{task}: S^emb of two seeds at epoch {last}: Pearson over token pairs, and controlling for "
                  f"S^sig,(0) (mean, range over {len(pairs)} pairs)",
                  f"{_pairs(n['between'])}; {_pairs(n['between_partial'])}",
                  "different geometries: not asserted (no threshold in the paper)", None),
        KeyNumber(f"{task}: training accuracy at epoch {last} (median, min)",
                  f"{fmt(ms.median([p['accuracy'] for p in per]))}, {fmt(min(p['accuracy'] for p in per))}",
                  "not asserted", None),
    ]


def _describe_spectra_part(task: str, n: dict) -> str:
    """The paragraph of one part of ``seed-spectra`` from :func:`spectra_numbers`."""
    last, per, by_k, n_k = n["last"], n["per"], n["by_k"], n["n_k"]
    r_stars, partial_stars = n["r_stars"], n["partial_stars"]
    return (
        f"On `{task}`, {len(per)} seeds read at epoch {last}: two seeds' embedding similarity matrices correlate "
        f"{_pairs(n['between'])}, and {_pairs(n['between_partial'])} controlling for S^sig,(0). Restricted to "
        f"k > {SPECTRA_K_MIN - 1}, the Fourier frequency whose order-1 geometry best matches a seed's embeddings takes "
        f"{len(by_k)} distinct values over {len(per)} seeds ({', '.join(map(str, by_k))})"
        + ("; every seed has its own." if len(by_k) == len(per) else
           f"; the expectation that every seed has its own is not met ({_shared_text(by_k)}).")
        + f" Drawn at random from the {n_k} frequencies, {len(per)} seeds would give "
        f"{n['chance_distinct']:.1f} distinct values on average; {n['beating']} of {len(per)} seeds' best alignments "
        f"beat the chance level of the best of "
        f"{n_k} frequencies with the tokens relabelled (p < {SPECTRA_ALPHA}). The alignment at k* is "
        f"{fmt(min(r_stars))} to {fmt(max(r_stars))}, and {fmt(min(partial_stars))} to "
        f"{fmt(max(partial_stars))} with S^sig,(0) partialled out."
    )


def _draw_spectra_part(task: str, n: dict) -> Figures:
    """Every seed's S^emb with its k*, and every seed's Fourier profile, of one part of ``seed-spectra``."""
    last, per, S, tokens = n["last"], n["per"], n["S"], n["tokens"]
    return {
        f"{task}_geometries.png": (f"`{task}`: S^emb of the task tokens at epoch {last} for every seed, titled with "
                                   "its k* and r.",
                                   learning_figures.similarity_grid(
                                       [(f"seed {p['seed']}: k* = {p['k_star']}, r = {p['r_star']:.2f}", s)
                                        for p, s in zip(per, S)], tokens,
                                       f"{task}: embedding similarity $S^{{\\mathrm{{emb}}}}$ at epoch {last}, "
                                       "one panel per seed")),
        f"{task}_fourier.png": (f"`{task}`: Fourier alignment over k at epoch {last} for every seed (Pearson r, "
                                "and r controlling for S^sig,(0)); k* marked.",
                                learning_figures.fourier_profiles_figure(per, SPECTRA_K_MIN)),
    }


def _spectra_part_rows(task: str, n: dict) -> list[dict]:
    """``summary.csv`` rows of one part of ``seed-spectra``: one per seed."""
    return [{"task": task, **{key: p[key] for key in ("seed", "k_star", "r_star", "partial_r_star", "null_p",
                                                       "partial_null_p", "accuracy")}} for p in n["per"]]


def _summarise_spectra_part(n: dict) -> dict:
    """``summary.json`` of one part of ``seed-spectra``."""
    return {"epoch": n["last"], "k_min": SPECTRA_K_MIN, "members": n["per"], "between_seed_pearson": n["between"],
            "between_seed_partial": n["between_partial"]}


def measure_spectra(out: Path, paths: dict[str, Path]) -> dict[str, dict]:
    """Task -> :func:`spectra_numbers` of each part of ``seed-spectra`` present."""
    return {task: spectra_numbers(paths[task]) for task in SPECTRA_PARTS if task in paths}


register(TrainedRecipe(
    name="seed-spectra", figure="SPEC §8 D (App. D)",
    expectation="10 seeds of staircase-add and of staircase-mod at epoch 1000: different geometries, each best "
                "matched by a different frequency k* = argmax over k > 10",
    cpu_time="≈ 1 min",
    paper=Paper("different geometries per seed, each best matched by a different frequency "
                "k* = argmax_{k>10}",
                f"10 seeds at epoch 1000; {SPEC8_SETTINGS}"),
    runs=lambda: {task: _spectra_config(source) for task, source in SPECTRA_PARTS.items()},
    measure=measure_spectra,
    judge=lambda parts: [k for task, n in parts.items() for k in _judge_spectra_part(task, n)],
    describe=lambda parts: " ".join(_describe_spectra_part(task, n) for task, n in parts.items()),
    draw=lambda paths, parts: {name: fig for task, n in parts.items()
                               for name, fig in _draw_spectra_part(task, n).items()},
    summary=lambda parts: {task: _summarise_spectra_part(n) for task, n in parts.items()},
    member_rows=lambda parts: [row for task, n in parts.items() for row in _spectra_part_rows(task, n)],
))

"""Order-0 informativeness sets the learning onset (SPEC §8 F9): ``modulus-onset``.

    ctxstair run modulus-onset --out runs/modulus-onset          # F9, about 2.5 min (--seeds K)

Defaults, and why (docs/recipes.md has the measurements): ``modsum`` (y = (x1 + x2) mod M over all
N² pairs), N = 20, one part per M = 2..20 with 3 seeds each, the CBOW model with tanh, full-batch
gradient descent lr 2 (the discrete gradient flow, as ``staircase-add``), γ = 1, a cap of 5000
epochs, no alignment analysis (the conclusion reads ``metrics.jsonl`` and ``signatures.npz``). With
ReLU (gradient descent or Adam) M | N is not slower at all, and with tanh under Adam the two groups
differ by less than 3× (docs/recipes.md).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.alignment import signature_cosine
from ctxstair.analysis import measures as ms
from ctxstair.analysis.measures import LEARNED_ACC
from ctxstair.config import AnalysisConfig, InitConfig, ModelConfig, RunConfig, SnapshotConfig, TaskConfig, TrainConfig
from ctxstair.errors import InputError
from ctxstair.recipes.base import SPEC8_SETTINGS, Figures, KeyNumber, Paper, TrainedRecipe, register
from ctxstair.report import learning_figures
from ctxstair.run import Run

#: The learning threshold (:data:`ctxstair.analysis.measures.LEARNED_ACC`) as report text: "95 %".
LEARNED = f"{LEARNED_ACC * 100:g} %"
#: F9: the median onset for M | N must be at least this multiple of the median for the other M.
ONSET_RATIO = 3.0

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


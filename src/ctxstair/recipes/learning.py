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
from ctxstair.recipes.base import KeyNumber, Outcome, Recipe, get, register
from ctxstair.report import learning_figures
from ctxstair.report import measures as ms
from ctxstair.run import Run

#: Training accuracy at which a task counts as learned (the paper's F9 onset).
LEARNED_ACC = 0.95
#: The same threshold as report text: "95 %".
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



def _epochs(values: list[int | None]) -> str:
    """Epochs of the members, 'never' for None."""
    return ", ".join("never" if v is None else str(v) for v in values)


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
    learned = ms.first_epoch(acc_epochs, acc >= LEARNED_ACC)
    before = epochs < learned if learned is not None else np.zeros(len(epochs), bool)
    aligned = ms.first_epoch(epochs, probe >= ALIGNED_PROBE)
    return dict(**ms.collinear_phase_probe(table, m), final_accuracy=float(acc[-1]), best_accuracy=float(acc.max()),
                epoch_95=learned, probe_zero_mean_end=float(probe0[-1]), aligned_epoch=aligned,
                acc_at_aligned=float("nan") if aligned is None else ms.value_at(acc_epochs, acc, aligned),
                probe_before_learned=float(probe[before][-1]) if before.any() else float("nan"),
                snapshot_before_learned=int(epochs[before][-1]) if before.any() else None,
                curves={"acc": (acc_epochs, acc), "probe": (epochs, probe)})


def conclude_ffn(out: Path, paths: dict[str, Path]) -> Outcome:
    """The key numbers, paragraph and figures of ``ffn-vs-attention``, from its two parts' files."""
    per = {part: [_ffn_member(paths[part], m) for m in ms.members(paths[part])] for part in FFN_PARTS}
    med = {part: {key: ms.median([p[key] for p in per[part]]) for key in ("final_accuracy", "probe_end")}
           for part in FFN_PARTS}
    chance = 1.0 / len(rundir.read_signatures(paths["cbow"]).labels)
    cbow, att = per["cbow"], per["attention"]
    cbow_learned = all(p["epoch_95"] is not None for p in cbow)
    aligned_first = cbow_learned and all(p["probe_before_learned"] >= ALIGNED_PROBE for p in cbow)
    att_rise, att_noise, att_rises = ms.probe_rise(att)
    keys = [
        KeyNumber("CBOW: training accuracy at the end",
                  f"{ms.fmt(med['cbow']['final_accuracy'])} (chance {ms.fmt(chance)})",
                  f"learned: ≥ {LEARNED}", bool(med["cbow"]["final_accuracy"] >= LEARNED_ACC)),
        KeyNumber(f"attention-only: training accuracy at the end (median over {len(att)} seed(s))",
                  f"{ms.fmt(med['attention']['final_accuracy'])} (chance {ms.fmt(chance)}; best per seed "
                  f"{', '.join(ms.fmt(p['best_accuracy']) for p in att)})",
                  f"fails: the median seed stays below {LEARNED} at every epoch",
                  bool(ms.median([p["best_accuracy"] for p in att]) < LEARNED_ACC)),
        KeyNumber(f"first epoch with training accuracy ≥ {LEARNED} (CBOW / attention-only)",
                  f"{_epochs([p['epoch_95'] for p in cbow])} / {_epochs([p['epoch_95'] for p in att])}",
                  "CBOW within the budget; attention-only never", None),
        KeyNumber("CBOW: held-out order-1 probe at the end", ms.fmt(med["cbow"]["probe_end"]),
                  f"aligned with order 1: ≥ {ALIGNED_PROBE}", bool(med["cbow"]["probe_end"] >= ALIGNED_PROBE)),
        KeyNumber(f"attention-only: held-out order-1 probe, collinear phase → end (median over {len(att)} seed(s))",
                  f"{ms.fmt(ms.median([p['probe_collinear'] for p in att]))} → {ms.fmt(med['attention']['probe_end'])} "
                  f"(per seed at the end: {', '.join(ms.fmt(p['probe_end']) for p in att)}; median rise "
                  f"{ms.fmt(att_rise)}, seed-to-seed spread of the probe in the collinear phase {ms.fmt(att_noise)})",
                  f"aligns with order 1: the median rise exceeds the collinear-phase spread, over ≥ {ms.MIN_SEEDS} "
                  f"seeds; whether it ends ≥ {ALIGNED_PROBE} is not judged (it depends on when each seed leaves "
                  "the plateau)", att_rises),
        KeyNumber(f"CBOW: held-out order-1 probe at the last snapshot before accuracy reached {LEARNED}",
                  ", ".join(f"never reached {LEARNED}" if p["epoch_95"] is None else
                            f"{ms.fmt(p['probe_before_learned'])} at epoch {p['snapshot_before_learned']} "
                            f"({LEARNED} at {p['epoch_95']})" for p in cbow),
                  f"aligned before learned: ≥ {ALIGNED_PROBE}", aligned_first),
        KeyNumber(f"first snapshot with the order-1 probe ≥ {ALIGNED_PROBE}, and the accuracy then "
                  "(CBOW / attention-only)",
                  " / ".join(", ".join("never" if p["aligned_epoch"] is None else
                                       f"{p['aligned_epoch']} ({ms.fmt(p['acc_at_aligned'])})" for p in per[part])
                             for part in FFN_PARTS),
                  "both align; only CBOW then learns", None),
    ]
    first_c, first_a = cbow[0], att[0]
    tokens = rundir.read_signatures(paths["cbow"]).tokens
    att_aligned = bool(att_rises)
    paragraph = (
        f"Both models are trained on mod (N = {len(tokens)}) with the same optimiser. The CBOW model ends at accuracy "
        f"{ms.fmt(med['cbow']['final_accuracy'])} (member 0: ≥ {LEARNED} from epoch {_epochs([first_c['epoch_95']])})"
        + (f", and its held-out order-1 probe was already {ms.fmt(first_c['probe_before_learned'])} at the last "
           f"snapshot before that (epoch {first_c['snapshot_before_learned']})"
           if first_c["epoch_95"] is not None else "")
        + ". The attention-only model "
        + ("aligns with order 1 as well" if att_aligned else "does not align with order 1")
        + f" (probe {ms.fmt(med['attention']['probe_end'])} at the end, median over {len(att)} seeds; member 0 "
        f"≥ {ALIGNED_PROBE} first at epoch "
        f"{_epochs([first_a['aligned_epoch']])}) and ends at accuracy {ms.fmt(med['attention']['final_accuracy'])} "
        f"(chance {ms.fmt(chance)})"
        + (": signature structure is not a solution." if att_aligned and ms.median([p["best_accuracy"] for p in att])
           < LEARNED_ACC else ".")
    )
    figures = _ffn_figures(paths, per, tokens, chance)
    rows = [dict(model=part, member=m, seed=seed, final_accuracy=p["final_accuracy"], epoch_95=p["epoch_95"],
                 probe_collinear=p["probe_collinear"], probe_end=p["probe_end"],
                 probe_zero_mean_end=p["probe_zero_mean_end"],
                 aligned_epoch=p["aligned_epoch"])
            for part in FFN_PARTS for m, (seed, p) in enumerate(zip(ms.member_seeds(paths[part]), per[part]))]
    summary = {part: [{k: v for k, v in p.items() if k != "curves"} for p in per[part]] for part in FFN_PARTS}
    return Outcome(keys, paragraph, figures, {"chance": chance, **summary}, rows)


register(Recipe(
    name="ffn-vs-attention", figure="SPEC §8 F8a",
    expectation="mod, N = 40: CBOW learns once aligned with order 1; attention-only aligns with order 1 but fails",
    cpu_time="≈ 40 s",
    runs=lambda: {part: _ffn_config(part) for part in FFN_PARTS},
    conclude=conclude_ffn,
))


# --------------------------------------------------------------------------------- modulus-onset (F9)

ONSET_MODULI = tuple(range(2, 21))

def _ffn_figures(paths: dict[str, Path], per: dict[str, list[dict]], tokens: np.ndarray, chance: float) -> dict:
    """The figures of ``ffn-vs-attention``: accuracy and probe curves, and member 0's final embeddings."""
    cbow, att = per["cbow"], per["attention"]
    panels = []
    for part, label in (("cbow", "CBOW (tanh)"), ("attention", "attention-only")):
        last = rundir.snapshot_times(paths[part])[-1]
        W = rundir.load_snapshot(paths[part], last)["W_E"][0][tokens].astype(np.float64)
        p = per[part][0]
        panels.append((f"{label}, epoch {last}\naccuracy {ms.fmt(p['final_accuracy'])}, order-1 probe "
                       f"{ms.fmt(p['probe_end'])}", W))
    return {
        "learning.png": ("Training accuracy (top) and the held-out order-1 probe (bottom) of the CBOW and the "
                         "attention-only model over training.",
                         learning_figures.accuracy_and_probe_figure(
                             {"CBOW": [p["curves"] for p in cbow], "attention-only": [p["curves"] for p in att]},
                             chance, LEARNED_ACC)),
        "pca.png": ("Final embeddings of the task tokens of both models (member 0) on their first two principal "
                    "components.", learning_figures.pca_panels_figure(
                        panels, tokens, "Final embeddings on their first two principal components (member 0)")),
    }



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
            rows.append(dict(M=M, seed=seed, onset_epoch=ms.first_epoch(epochs, acc >= LEARNED_ACC),
                             M_divides_N=N % M == 0, final_accuracy=float(acc[-1])))
    if len(caps) != 1 or len(Ns) != 1:
        raise InputError(f"the parts of {Path(next(iter(paths.values()))).parent} differ in epochs {sorted(caps)} "
                         f"or N {sorted(Ns)}: the onsets cannot be compared")
    return rows, Ns.pop(), caps.pop()


def censored_median(onsets: list[int | None], cap: int) -> tuple[float, bool]:
    """(median, lower_bound): the median onset with censored runs (None) counted as ``cap``, and
    whether it is only a lower bound (the median would grow if the censored runs took longer)."""
    at_cap = np.array([cap if o is None else o for o in onsets], dtype=float)
    at_inf = np.array([np.inf if o is None else o for o in onsets], dtype=float)
    median = float(np.median(at_cap))
    return median, bool(np.median(at_inf) != median)


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


def conclude_onset(out: Path, paths: dict[str, Path]) -> Outcome:
    """The key numbers, paragraph and figures of ``modulus-onset``: onsets per modulus M, from files."""
    rows, N, cap = onset_rows(paths)
    rule = onset_rule(rows, cap)
    Ms = sorted({r["M"] for r in rows})
    divisors = [M for M in Ms if N % M == 0]
    others = [M for M in Ms if N % M]

    def spread(flag: bool) -> str:
        values = [cap if r["onset_epoch"] is None else r["onset_epoch"] for r in rows if r["M_divides_N"] == flag]
        return f"{min(values)}–{max(values)}" if values else "n/a"

    reached = [r for r in rows if r["onset_epoch"] is not None]
    slowest_other = max((r for r in reached if not r["M_divides_N"]), key=lambda r: r["onset_epoch"], default=None)
    fastest_div = min((r for r in reached if r["M_divides_N"]), key=lambda r: r["onset_epoch"], default=None)
    ratio_text = (f"{'≥ ' if rule['median_divides_bound'] and not rule['median_other_bound'] else ''}"
                  f"{rule['ratio']:.1f}×" + (" (not determined: the median for the other M is censored)"
                                              if rule["median_other_bound"] else ""))
    keys = [
        KeyNumber(f"median onset for M | N (M = {', '.join(map(str, divisors))}; {rule['n_divides']} runs)",
                  f"{_median_text(rule['median_divides'], rule['median_divides_bound'])} epochs (runs: {spread(True)})",
                  "thousands of epochs (the paper's M | N: 4, 5, 10, 20)", None),
        KeyNumber(f"median onset for the other M ({len(others)} moduli; {rule['n_other']} runs)",
                  f"{_median_text(rule['median_other'], rule['median_other_bound'])} epochs (runs: {spread(False)})",
                  "a few hundred epochs", None),
        KeyNumber("ratio of the two medians (M | N over the other M)", ratio_text,
                  f"≥ {ONSET_RATIO:g}× (issue 7)", rule["met"]),
        KeyNumber(f"censored runs (accuracy never ≥ {LEARNED} within the cap of {cap} epochs)",
                  f"{rule['censored']} of {len(rows)}", "counted as ≥ the cap in the medians", None),
        KeyNumber("slowest run with M ∤ N vs fastest run with M | N",
                  (f"M = {slowest_other['M']} at epoch {slowest_other['onset_epoch']}" if slowest_other else "none")
                  + " vs "
                  + (f"M = {fastest_div['M']} at epoch {fastest_div['onset_epoch']}" if fastest_div else "none"),
                  "not asserted: whether the two groups overlap at all", None),
    ]
    per_M = {M: censored_median([r["onset_epoch"] for r in rows if r["M"] == M], cap) for M in Ms}
    paragraph = (
        f"y = (x1 + x2) mod M over all pairs of 1..{N}. When M divides N every number is followed by every residue "
        f"equally often, so all order-0 label signatures are equal (their similarity heatmaps are constant) and the "
        f"first, order-0 stage of the staircase cannot tell the tokens apart; otherwise the order-0 signatures "
        f"already separate the residues. The median first epoch with training accuracy ≥ {LEARNED} is "
        f"{_median_text(rule['median_divides'], rule['median_divides_bound'])} for M | N "
        f"(M = {', '.join(map(str, divisors))}) against "
        f"{_median_text(rule['median_other'], rule['median_other_bound'])} "
        f"for the other M: a ratio of {ratio_text} (expected ≥ {ONSET_RATIO:g}×). "
        f"{rule['censored']} of {len(rows)} runs did not reach {LEARNED} within the cap of {cap} epochs "
        f"(censored, counted as ≥ the cap)."
        + (" M = 2 divides N too and is slow like the other divisors (the paper's list for N = 20 is 4, 5, 10, 20)."
           if 2 in divisors
           and per_M[2][0] >= ONSET_RATIO * rule["median_other"] else "")
    )
    tokens = rundir.read_signatures(next(iter(paths.values()))).tokens
    panels = []
    for run in paths.values():
        M = int(Run(run).config.task.params["M"])
        median, bound = per_M[M]
        panels.append((f"M = {M}{' (M | N)' if N % M == 0 else ''}\nmedian onset {_median_text(median, bound)}",
                       signature_cosine(rundir.read_signatures(run).orders[0])))
    figures = {
        "onset.png": (f"First epoch with training accuracy ≥ {LEARNED} against M (one point per seed; "
                      "M | N shaded; open triangles: censored at the cap).",
                      learning_figures.onset_figure(rows, N, cap, LEARNED_ACC)),
        "order0.png": ("Order-0 signature similarity S^sig,(0) of the tokens 1..N for each M, from each part's "
                       "signatures.npz, each panel stretched over its own range: constant (all 1) when M | N.",
                       learning_figures.similarity_grid(panels, tokens, "Order-0 label-signature similarity "
                                                        "$S^{sig,(0)}$ per modulus M (cosine over token pairs; "
                                                        "each panel on its own colour range)", per_panel=True)),
    }
    summary = {"N": N, "cap": cap, "learned_acc": LEARNED_ACC, "rule": rule,
               "median_onset_per_M": {str(M): {"median": v[0], "lower_bound": v[1]} for M, v in per_M.items()}}
    return Outcome(keys, paragraph, figures, summary, rows)


register(Recipe(
    name="modulus-onset", figure="SPEC §8 F9",
    expectation="y = (x1 + x2) mod M, N = 20: onset (first epoch with accuracy ≥ 95 %) in the thousands when "
                "M | N, a few hundred otherwise; median for M | N ≥ 3× the median for the other M",
    cpu_time="≈ 2.5 min (19 moduli × 3 seeds × 5000 epochs)",
    runs=lambda: {onset_part(M): _onset_config(M) for M in ONSET_MODULI},
    conclude=conclude_onset,
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
    return f"{ms.fmt(float(np.mean(values)))} ({ms.fmt(min(values))} to {ms.fmt(max(values))})" if values else "n/a"


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


def _spectra_part(task: str, run: Path) -> Outcome:
    """Key numbers (named ``task: ...``), paragraph, figures and rows of one part of ``seed-spectra``."""
    last = rundir.snapshot_times(run)[-1]
    sigs = rundir.read_signatures(run)
    S = [cosine_matrix(w) for w in rundir.load_snapshot(run, last)["W_E"][:, sigs.tokens].astype(np.float64)]
    S0 = signature_cosine(sigs.orders[0])
    per = _spectra_seeds(run, last, sigs, S, S0)
    n_k = int(np.sum(np.asarray(per[0]["ks"]) >= SPECTRA_K_MIN))
    # Distinct values among len(per) independent uniform draws from n_k frequencies, on average.
    chance_distinct = n_k * (1 - (1 - 1 / n_k) ** len(per))
    beating = sum(p["null_p"] < SPECTRA_ALPHA for p in per)
    partial_beating = sum(p["partial_null_p"] < SPECTRA_ALPHA for p in per)
    pairs = [(i, j) for i in range(len(S)) for j in range(i + 1, len(S))]
    between = [float(compare(S[i], S[j])["pearson"]) for i, j in pairs]
    between_partial = [float(_partial(S[i], S[j], S0)) for i, j in pairs]
    by_k = {k: [p["seed"] for p in per if p["k_star"] == k] for k in sorted({p["k_star"] for p in per})}
    shared = "; ".join(f"k = {k} for seeds {', '.join(map(str, seeds))}" for k, seeds in by_k.items() if len(seeds) > 1)
    r_stars, partial_stars = [p["r_star"] for p in per], [p["partial_r_star"] for p in per]
    keys = [
        KeyNumber(f"{task}: k* = argmax over k > {SPECTRA_K_MIN - 1} of the Fourier alignment at epoch {last}, per "
                  f"seed (r; r controlling for S^sig,(0))",
                  "; ".join(f"seed {p['seed']}: {p['k_star']} ({ms.fmt(p['r_star'], 2)}; "
                            f"{ms.fmt(p['partial_r_star'], 2)})" for p in per),
                  "each seed best matched by its own frequency", None),
        KeyNumber(f"{task}: distinct k* over the seeds", f"{len(by_k)} of {len(per)} ({', '.join(map(str, by_k))})"
                  + (f"; shared: {shared}" if shared else "")
                  + f"; {chance_distinct:.1f} on average if each seed's k* were drawn at random from the {n_k} "
                  "frequencies",
                  f"a different frequency for every seed: {len(per)} of {len(per)}", len(by_k) == len(per)),
        KeyNumber(f"{task}: k* above chance: the best alignment over k > {SPECTRA_K_MIN - 1} against the same maximum "
                  f"with the tokens relabelled ({SPECTRA_PERMUTATIONS} permutations), p per seed",
                  "; ".join(f"seed {p['seed']}: p = {p['null_p']:.3f} (r {ms.fmt(p['r_star'], 2)} vs 95 % of chance "
                            f"{ms.fmt(p['null_q95'], 2)})" for p in per) + f"; {beating} of {len(per)} below "
                  f"{SPECTRA_ALPHA}",
                  f"every seed's k* a real match (p < {SPECTRA_ALPHA})", beating == len(per)),
        KeyNumber(f"{task}: Fourier alignment at k*: Pearson r, and r controlling for S^sig,(0) (median, range over "
                  f"seeds; seeds whose partialled r beats the best partialled r over k > {SPECTRA_K_MIN - 1} with the "
                  "tokens relabelled)",
                  f"{ms.fmt(ms.median(r_stars))} ({ms.fmt(min(r_stars))} to {ms.fmt(max(r_stars))}); "
                  f"{ms.fmt(ms.median(partial_stars))} ({ms.fmt(min(partial_stars))} to {ms.fmt(max(partial_stars))}); "
                  f"{partial_beating} of {len(per)} above chance (p < {SPECTRA_ALPHA}: "
                  f"{', '.join(str(p['seed']) for p in per if p['partial_null_p'] < SPECTRA_ALPHA) or 'none'})",
                  "not asserted: how well k* matches", None),
        KeyNumber(f"{task}: S^emb of two seeds at epoch {last}: Pearson over token pairs, and controlling for "
                  f"S^sig,(0) (mean, range over {len(pairs)} pairs)", f"{_pairs(between)}; {_pairs(between_partial)}",
                  "different geometries: not asserted (no threshold in the paper)", None),
        KeyNumber(f"{task}: training accuracy at epoch {last} (median, min)",
                  f"{ms.fmt(ms.median([p['accuracy'] for p in per]))}, {ms.fmt(min(p['accuracy'] for p in per))}",
                  "not asserted", None),
    ]
    paragraph = (
        f"On `{task}`, {len(per)} seeds read at epoch {last}: two seeds' embedding similarity matrices correlate "
        f"{_pairs(between)}, and {_pairs(between_partial)} controlling for S^sig,(0). Restricted to "
        f"k > {SPECTRA_K_MIN - 1}, the Fourier frequency whose order-1 geometry best matches a seed's embeddings takes "
        f"{len(by_k)} distinct values over {len(per)} seeds ({', '.join(map(str, by_k))})"
        + ("; every seed has its own." if len(by_k) == len(per) else
           f"; the expectation that every seed has its own is not met ({shared}).")
        + f" Drawn at random from the {n_k} frequencies, {len(per)} seeds would give {chance_distinct:.1f} distinct "
        f"values on average; {beating} of {len(per)} seeds' best alignments beat the chance level of the best of "
        f"{n_k} frequencies with the tokens relabelled (p < {SPECTRA_ALPHA}). The alignment at k* is "
        f"{ms.fmt(min(r_stars))} to {ms.fmt(max(r_stars))}, and {ms.fmt(min(partial_stars))} to "
        f"{ms.fmt(max(partial_stars))} with S^sig,(0) partialled out."
    )
    figures = {
        f"{task}_geometries.png": (f"`{task}`: S^emb of the task tokens at epoch {last} for every seed, titled with "
                                   "its k* and r.",
                                   learning_figures.similarity_grid(
                                       [(f"seed {p['seed']}: k* = {p['k_star']}, r = {p['r_star']:.2f}", s)
                                        for p, s in zip(per, S)], sigs.tokens,
                                       f"{task}: embedding similarity $S^{{emb}}$ at epoch {last}, one panel "
                                       "per seed")),
        f"{task}_fourier.png": (f"`{task}`: Fourier alignment over k at epoch {last} for every seed (Pearson r, "
                                "and r controlling for S^sig,(0)); k* marked.",
                                learning_figures.fourier_profiles_figure(per, SPECTRA_K_MIN)),
    }
    rows = [{"task": task, **{key: p[key] for key in ("seed", "k_star", "r_star", "partial_r_star", "null_p",
                                                       "partial_null_p", "accuracy")}} for p in per]
    return Outcome(keys, paragraph, figures, {"epoch": last, "k_min": SPECTRA_K_MIN, "members": per,
                                              "between_seed_pearson": between,
                                              "between_seed_partial": between_partial}, rows)


def conclude_spectra(out: Path, paths: dict[str, Path]) -> Outcome:
    """The key numbers, paragraph and figures of ``seed-spectra``: one best frequency per seed and task, from files."""
    parts = {task: _spectra_part(task, paths[task]) for task in SPECTRA_PARTS if task in paths}
    return Outcome([k for part in parts.values() for k in part.key_numbers],
                   " ".join(part.paragraph for part in parts.values()),
                   {name: fig for part in parts.values() for name, fig in part.figures.items()},
                   {task: part.summary for task, part in parts.items()},
                   [row for part in parts.values() for row in part.member_rows])


register(Recipe(
    name="seed-spectra", figure="SPEC §8 D (App. D)",
    expectation="10 seeds of staircase-add and of staircase-mod at epoch 1000: different geometries, each best "
                "matched by a different frequency k* = argmax over k > 10",
    cpu_time="≈ 1 min",
    runs=lambda: {task: _spectra_config(source) for task, source in SPECTRA_PARTS.items()},
    conclude=conclude_spectra,
))

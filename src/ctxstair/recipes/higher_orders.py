"""Several higher orders (SPEC §8 row C, App. C): ``higher-orders``.

    ctxstair run higher-orders --out runs/higher-orders          # about 6 min on 2 CPU cores
    ctxstair run higher-orders --set task.shifts=[]               # every residue a shift: order 1 blind to anchors
    ctxstair run higher-orders --set task.cross_shift=5           # two kinds of anchor: order 2 should add to order 1

Task ``two_anchor`` (``tasks/anchors.py``): X = (a1, a2, x), y = (s(a1) + s(a2) + x) mod p, with the p
context tokens 𝒳 = 0..p−1 and one anchor token per shift value, all A²p sequences. Defaults: p = 20
and the shifts 0..9 (half the residues). Every order-0 label signature is uniform (x runs over every
residue), so the order-0 correlation is undefined and 1 − MSE is read (SPEC §3). The anchors'
order-1 signatures differ: given the context token x, an anchor with shift s puts its label in
x + s + {0..9}, a window that moves with s, so the order-1 geometry of the anchors is a ring by shift
(cosine (10 − |s − s'|)/10 for nearby shifts), as the paper says order 1 distinguishes the anchors.
With every residue a shift (``task.shifts=[]``, the construction of the first version) the other
anchor's shift is uniform, every anchor's order-1 signature is the same, and only order 2 tells
anchors apart. The order-2 probe reads h_α = φ^{y;2}_α ×_2 v_1 ×_3 v_2 (``alignment/probe.py``; it
contains every order-1 probe, v_1 = 1).

Anchors and context tokens are also analysed apart (``order2.csv``, :mod:`ctxstair.analysis.order2`):
the order-1 probe, the order-1 probe beyond order 0 (v ⟂ 1) and the order-2 probe on each group's
tokens alone; order 2 beyond order 1 is the held-out r₂ − r₁ on the same pair folds.

Model, and why (docs/recipes.md has the alternatives tried): CBOW, d = 128, σ(z) = z + z³ (``poly``,
coefficients [1, 0, 1]: degree 3 reaches order 2 exactly, SPEC §6.2, and σ'(0) = 1 gives the collinear
order-0 plateau), γ = 1, Adam lr 1e-2, 3000 epochs, 3 seeds. tanh stays collinear for the whole
budget; ReLU learns without the negative phase.

Files: ``alignment.csv`` as for every run, plus ``order2.csv`` (same columns): ``order2_probe`` and
``order1_flat`` over all tokens, and the per-group probes above.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.analysis import measures as ms
from ctxstair.analysis.order2 import read_order2
from ctxstair.config import InitConfig, ModelConfig, RunConfig, TaskConfig, TrainConfig
from ctxstair.recipes.base import SPEC8_SETTINGS, Figures, KeyNumber, Paper, TrainedRecipe, members_summary, register
from ctxstair.report import higher_order_figures, run_figures
from ctxstair.report.formats import fmt
from ctxstair.run import Run

#: "≈ 1" and "≈ 0" in the expectation of SPEC §8 row C.
NEAR_ONE, NEAR_ZERO = 0.9, 0.1
#: The anchors' order-1 probe counts as telling them apart at this held-out Pearson: over 45 pairs
#: a correlation's spread under no relation is about 0.15, so 0.5 is more than three spreads out.
ANCHOR_BAR = 0.5


def member_numbers(run: Path, m: int) -> dict:
    """The row-C numbers of one member: the 1 − MSE curve's early peak, its later minimum and its end;
    the order-1 probe, the flattened order-1 geometry and the order-2 probe at the end; on the anchors
    alone, the order-1 probe (free and beyond order 0) and the order-2 probe at the end; accuracy."""
    table, extra = rundir.read_alignment(run), read_order2(run)
    epochs, mse = rundir.alignment_series(table, "order0", m, "one_minus_mse")
    defined = table["defined"][(table["signature"] == "order0") & (table["member"] == m)]
    _, r1 = rundir.alignment_series(table, "order1_probe", m)
    _, flat = rundir.alignment_series(extra, "order1_flat", m)
    _, r2 = rundir.alignment_series(extra, "order2_probe", m)

    def anchors(name: str) -> float:
        """The end value of a probe on the anchors alone (NaN for a run analysed before groups were)."""
        values = rundir.alignment_series(extra, f"{name}@anchors", m)[1]
        return float(values[-1]) if values.size else float("nan")

    peak = ms.collinear_phase(mse)
    dip = peak + int(np.argmin(mse[peak:]))
    acc_epochs, acc = ms.metric_series(run, m, "acc")
    plateau = epochs[(epochs >= epochs[peak]) & (mse >= NEAR_ONE)]
    s1_end = float(r1[-1]) if np.isfinite(r1[-1]) else float(flat[-1])
    a1, a2 = anchors("order1_probe"), anchors("order2_probe")
    return dict(member=m, any_defined=bool(defined.any()), peak=float(mse[peak]), peak_epoch=int(epochs[peak]),
                near_one_until=int(plateau.max()), dip=float(mse[dip]), dip_epoch=int(epochs[dip]), end=float(mse[-1]),
                r1_defined=int(np.isfinite(r1[1:]).sum()), r1_end=float(r1[-1]), flat_end=float(flat[-1]),
                flat_at_dip=float(flat[dip]), r2_end=float(r2[-1]), r2_max=float(np.nanmax(r2[1:])),
                r2_max_epoch=int(epochs[1:][np.nanargmax(r2[1:])]), s1_end=s1_end, anchors_r1_end=a1,
                anchors_r1_zero_mean_end=anchors("order1_probe_zero_mean"), anchors_r2_end=a2,
                anchors_gain_end=a2 - a1, acc_end=float(acc[-1]),
                learned=ms.learned_epoch(acc_epochs, acc), snapshots=int(epochs.size), last_epoch=int(epochs[-1]))


def measure(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of ``higher-orders``: per member (``per``, :func:`member_numbers`), their medians
    (``med``), and the task: ``p``, the anchors (``n_anchors``, their ``pairs``), the number of
    distinct shifts (``shifts``), ``cross_shift`` and whether every residue is a shift (``blind``)."""
    run = paths[""]
    per = [member_numbers(run, m) for m in ms.members(run)]
    dataset = Run(run).dataset
    n_anchors = dataset.meta["groups"]["anchors"].size
    shifts = np.unique(dataset.meta["shifts"]).size
    return dict(per=per, med=ms.medians(per, ("peak", "dip", "end", "r1_end", "r2_end", "flat_end", "s1_end",
                                              "acc_end", "r2_max", "anchors_r1_end", "anchors_r2_end")),
                n_anchors=n_anchors, pairs=n_anchors * (n_anchors - 1) // 2, p=dataset.params["p"], shifts=shifts,
                cross_shift=dataset.params.get("cross_shift"),
                blind=shifts == int(dataset.params["p"]))  # every residue a shift


def _each(per: list[dict], key: str) -> str:
    """One value per seed."""
    return ", ".join("never" if p[key] is None else fmt(p[key]) if isinstance(p[key], float) else str(p[key])
                     for p in per)


def _every_seed(values: list[float], test) -> bool | None:
    """``test`` of every seed's value; None (not judged) where a run has no such number."""
    return None if any(np.isnan(v) for v in values) else all(test(v) for v in values)


def judge(n: dict) -> list[KeyNumber]:
    """The key numbers of ``higher-orders`` from :func:`measure`."""
    per, med, first, pairs, blind = n["per"], n["med"], n["per"][0], n["pairs"], n["blind"]

    def each(key: str) -> str:
        return _each(per, key)

    ordered = all(p["peak_epoch"] < p["dip_epoch"] < p["last_epoch"] for p in per)
    return [
        KeyNumber("order-0 Pearson with S^(0)", "undefined at every snapshot" if not any(p["any_defined"] for p in per)
                  else "defined at some snapshot", "undefined: all order-0 signatures are equal, 1 − MSE is read",
                  not any(p["any_defined"] for p in per)),
        KeyNumber("order-0 1 − MSE: early peak (per seed)", f"{each('peak')} at epochs {each('peak_epoch')}; ≥ "
                  f"{NEAR_ONE} until epochs {each('near_one_until')}", f"≈ 1 (≥ {NEAR_ONE}) early",
                  all(p["peak"] >= NEAR_ONE for p in per)),
        KeyNumber("order-0 1 − MSE: minimum after the peak", f"{each('dip')} at epochs {each('dip_epoch')}",
                  "negative, between the peak and the end", all(p["dip"] < 0 for p in per) and ordered),
        KeyNumber(f"order-0 1 − MSE at the end (per seed; judged on the median over {len(per)})",
                  f"{each('end')} (median {fmt(med['end'])})",
                  f"≈ 0 (|median| ≤ {NEAR_ZERO}, over ≥ {ms.MIN_SEEDS} seeds: a single seed's end value moved by 0.09 "
                  "between two code paths)", bool(abs(med["end"]) <= NEAR_ZERO) if len(per) >= ms.MIN_SEEDS else None),
        KeyNumber("order-1 probe on the task tokens, held-out, at the end", f"{each('r1_end')} (defined at "
                  f"{each('r1_defined')} of {first['snapshots'] - 1} snapshots after epoch 0)", f"≈ 1 (≥ {NEAR_ONE})",
                  all(p["r1_end"] >= NEAR_ONE for p in per)),
        KeyNumber(f"order-1 probe on the {n['n_anchors']} anchors alone, beyond order 0 (v ⟂ 1), held-out, at the end",
                  f"{each('anchors_r1_zero_mean_end')} (free probe: {each('anchors_r1_end')})",
                  f"≥ {ANCHOR_BAR} for every seed: the anchors' order-1 signatures differ while order 0 is the same "
                  f"for all (a correlation over {pairs} pairs has a null spread of about {1 / np.sqrt(pairs):.2f})"
                  + ("; with every residue a shift order 1 is blind to the anchors, so none is expected" if blind
                     else ""),
                  None if blind else _every_seed([p["anchors_r1_zero_mean_end"] for p in per],
                                                 lambda v: v >= ANCHOR_BAR)),
        KeyNumber("order-1 signature geometry of the task tokens, flattened",
                  f"{each('flat_end')} at the end ({each('flat_at_dip')} at the 1 − MSE minimum)", "reported", None),
        KeyNumber("order-2 probe (two vectors) on the task tokens, held-out, at the end", f"{each('r2_end')} (max "
                  f"{each('r2_max')} at epochs {each('r2_max_epoch')})", f"≈ 1 (≥ {NEAR_ONE})",
                  all(p["r2_end"] >= NEAR_ONE for p in per)),
        KeyNumber("S^(2) ≥ S^(1) late on the task tokens (S^(1): the order-1 probe where defined, else the "
                  "flattened order-1 geometry)", f"{each('r2_end')} vs {each('s1_end')}", "order 2 higher",
                  all(p["r2_end"] >= p["s1_end"] for p in per)),
        KeyNumber("order 2 beyond order 1 on the anchors: held-out r₂ − r₁ at the end (same pair folds)",
                  f"{each('anchors_gain_end')} (r₂ {each('anchors_r2_end')})",
                  "> 0 for every seed (order 2 higher late)",
                  _every_seed([p["anchors_gain_end"] for p in per], lambda v: v > 0)),
        KeyNumber("training accuracy at the end", f"{each('acc_end')} (≥ 95 % from epochs {each('learned')})",
                  "the task is learned (≥ 95 %)", all(p["acc_end"] >= ms.LEARNED_ACC for p in per)),
    ]


def describe(n: dict) -> str:
    """The paragraph of ``higher-orders`` from :func:`measure`."""
    per, med, n_anchors, blind = n["per"], n["med"], n["n_anchors"], n["blind"]
    first = per[0]
    return (
        f"On X = (a1, a2, x), y = (s(a1) + s(a2) + x) mod {n['p']} with {n_anchors} anchors every "
        f"task token's order-0 signature is the same, so the order-0 alignment is read as 1 − MSE: it rises to "
        f"{fmt(med['peak'])} "
        f"(1 means collinear embeddings), falls to {fmt(med['dip'])} around epoch {first['dip_epoch']} and ends at "
        f"{fmt(med['end'])} (median over {len(per)} seeds). On the task tokens the order-1 probe ends at "
        f"{fmt(med['r1_end'])} and the order-2 probe at {fmt(med['r2_end'])}. "
        + ("Every residue is a shift, so the anchors' order-1 signatures are all the same and only order 2 tells "
           "them apart. " if blind else
           f"The anchors' shifts cover {n['shifts']} of the {n['p']} residues, "
           f"so their order-1 signatures differ"
           + (f" (two anchors per shift, of two kinds; a pair of different kinds adds {n['cross_shift']} "
              "to the label, which only order 2 sees)" if n["cross_shift"] else "")
           + f": on the anchors alone the order-1 probe ends at {fmt(med['anchors_r1_end'])} and the order-2 "
           f"probe at {fmt(med['anchors_r2_end'])}. ")
        + f"Training accuracy ends at {fmt(med['acc_end'])}."
    )


def draw(paths: dict[str, Path], n: dict) -> Figures:
    """The recipe's figures: orders over training, the token groups apart, and the geometry of member 0."""
    run, first = paths[""], n["per"][0]
    return {
        "orders.png": ("Alignment with the order-0 (1 − MSE), order-1 and order-2 signature geometries (top), loss "
                       "and accuracy (bottom) over training.", higher_order_figures.orders_figure(run)),
        "groups.png": ("Anchors and context tokens analysed apart: the order-1 probe, the order-1 probe beyond order 0 "
                       "(v ⟂ 1) and the order-2 probe on each group's tokens alone.",
                       higher_order_figures.groups_figure(run)),
        "geometry.png": ("Embedding similarity at the 1 − MSE peak, minimum and end (member 0) next to the signature "
                         "geometries.",
                         run_figures.geometry_figure(run, sorted({first['peak_epoch'], first['dip_epoch'],
                                                                  first['last_epoch']}))),
    }


register(TrainedRecipe(
    name="higher-orders", figure="SPEC §8 row C (App. C)",
    expectation="order 0 (1 − MSE) ≈ 1 early, then negative, then ≈ 0; order-1 and order-2 probes → ≈ 1, "
                "order 1 tells the anchors apart, order 2 higher late",
    cpu_time="≈ 6 min",
    paper=Paper("ρ with S^(0) briefly ≈ 1, then negative, then ≈ 0; S^(1) and S^(2) → ≈ 1, S^(2) higher late",
                f"X = (a1, a2, x), y = (a1 + a2 + x) mod |𝒳| (all order-0 signatures equal); {SPEC8_SETTINGS}"),
    runs=lambda: {"": RunConfig(recipe="higher-orders",
                                task=TaskConfig("two_anchor", {"p": 20, "shifts": list(range(10)),
                                                                "analysed": "anchors"}),
                                model=ModelConfig(d=128, activation="poly", coeffs=[1.0, 0.0, 1.0],
                                                  init=InitConfig(gamma=1.0)),
                                train=TrainConfig(optimizer="adam", lr=1e-2, epochs=3000, members=ms.MIN_SEEDS))},
    analyses=("alignment", "order2"),
    measure=measure, judge=judge, describe=describe, draw=draw, summary=members_summary,
))

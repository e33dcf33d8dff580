"""The attention-only model (SPEC §5, §6.3): ``attention-arith`` (F5a) and ``attention-parity`` (F5b).

    ctxstair run attention-parity --out runs/attention-parity     # about 20 s on 2 CPU cores
    ctxstair run attention-arith --out runs/attention-arith       # about 20 s

Defaults, and why (docs/recipes.md has the measurements):

* ``attention-arith``: ``add`` and ``mod`` at N = 20, d = 128, d_k = 64, γ = 1, full-batch Adam
  lr 1e-2, 3000 epochs (the paper trains 10,000; every key number is settled by 3000 — pass
  ``--set train.epochs=10000`` for the paper's length). At lr 1e-3 ``add`` is learned as well but
  its late geometry stays as close to order 0 as to order 1 (docs/recipes.md).
* ``attention-parity``: anchors 11..20, noise 21..60, L = 8, 10,000 samples drawn once, 200
  epochs, γ = 1, Adam lr 1e-3 in minibatches of 1000. Full-batch Adam (200 steps) at lr 1e-3
  never leaves the plateau where only the label marginal is learned; at lr 1e-2 the attention on
  noise stays at 0.06 per position.

Both write ``attention.csv`` (:mod:`ctxstair.analysis.attention_groups`) next to ``alignment.csv``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.alignment import compare, cosine_matrix, mean_cosine, signature_cosine
from ctxstair.analysis import measures as ms
from ctxstair.analysis.attention_groups import group_series, read_attention_run
from ctxstair.config import InitConfig, ModelConfig, RunConfig, SnapshotConfig, TaskConfig, TrainConfig
from ctxstair.recipes.base import Figures, KeyNumber, Paper, TrainedRecipe, members_summary, register
from ctxstair.recipes.staircase import member_add_numbers
from ctxstair.report import attention_figures, run_figures
from ctxstair.report.formats import fmt
from ctxstair.run import Run
from ctxstair.theory.attention_run import PATHS


def _config(name: str, task: TaskConfig, lr: float, epochs: int, batch_size: int = 0, every: int = 100,
            members: int = 1) -> RunConfig:
    return RunConfig(recipe=name, task=task,
                     model=ModelConfig(kind="attention", d=128, d_k=64, init=InitConfig(gamma=1.0)),
                     train=TrainConfig(optimizer="adam", lr=lr, epochs=epochs, batch_size=batch_size, members=members),
                     snapshots=SnapshotConfig(every=every))


def _path_share(table: dict, group: str, member: int, epoch: int, path: str) -> float:
    """Share of ``path`` in the update of ``group`` at ``epoch`` (path norm / sum of the three)."""
    rows = (table["group"] == group) & (table["member"] == member) & (table["epoch"] == epoch)
    norms = {p: float(table[f"path_{p}"][rows][0]) for p in PATHS}
    total = sum(norms.values())
    return norms[path] / total if total > 0 else float("nan")


# ------------------------------------------------------------------------------- attention-arith (F5a)

#: Seeds of the mod part. The attention-only model does not learn mod, and where its order-1 probe
#: ends depends on when each seed leaves the plateau: 0.15-0.98 over 8 seeds and two code paths,
#: 3 of 16 below 0.5 (docs/reliability.md). So mod is judged over seeds, on the rise of the probe.
MOD_SEEDS = ms.MIN_SEEDS


def _mod_numbers(run: Path, m: int) -> dict:
    """Collinear phase and late order-1 structure of a ``mod`` run (all order-0 signatures equal)."""
    acc_epochs, acc = ms.metric_series(run, m, "acc")
    return dict(**ms.collinear_phase_probe(rundir.read_alignment(run), m), acc_end=float(acc[-1]),
                chance=ms.chance_accuracy(run), learned=ms.learned_epoch(acc_epochs, acc),
                value_share_init=_path_share(read_attention_run(run), "tokens", m, 0, "value"))


def _add_numbers(run: Path, m: int) -> dict:
    """The staircase numbers of an ``add`` run (as ``staircase-add``) and the value path's initial share."""
    return {**member_add_numbers(run, m),
            "value_share_init": _path_share(read_attention_run(run), "tokens", m, 0, "value")}


def measure_arith(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of ``attention-arith``: per member of each part (``add``, ``mod``), their medians
    (``a``, ``b``), member 0 of each (``fa``, ``fb``) and the mod probe's rise over the seeds
    (:func:`~ctxstair.analysis.measures.probe_rise`: ``rise``, ``noise``, ``rises``)."""
    add = [_add_numbers(paths["add"], m) for m in ms.members(paths["add"])]
    mod = [_mod_numbers(paths["mod"], m) for m in ms.members(paths["mod"])]
    rise, noise, rises = ms.probe_rise(mod)
    return dict(add=add, mod=mod, a=ms.medians(add, ("peak", "end", "probe_end", "probe0_end", "acc_end",
                                                     "value_share_init")),
                b=ms.medians(mod, ("collinear", "probe_collinear", "probe_end", "acc_end", "value_share_init")),
                fa=add[0], fb=mod[0], rise=rise, noise=noise, rises=rises)


def judge_arith(n: dict) -> list[KeyNumber]:
    """The key numbers of ``attention-arith`` from :func:`measure_arith`."""
    a, b, fa, fb, mod = n["a"], n["b"], n["fa"], n["fb"], n["mod"]
    return [
        KeyNumber("add: order-0 Pearson at its early peak",
                  f"{fmt(a['peak'])} at epoch {fa['peak_epoch']} (loss {fmt(fa['peak_loss'], 2)}; halfway "
                  f"{fmt(fa['halfway'], 2)})", "≥ 0.9, before the loss has fallen halfway", bool(a["peak"] >= 0.9)),
        KeyNumber("add: held-out order-1 probe vs order 0 at the end",
                  f"{fmt(a['probe_end'])} vs {fmt(a['end'])} (zero-mean probe {fmt(a['probe0_end'])})",
                  "order 1 above order 0 late", bool(a["probe_end"] > a["end"])),
        KeyNumber("add: training accuracy at the end",
                  f"{fmt(a['acc_end'])} (100 % first at epoch {fa['acc_full']})",
                  "100 %", bool(a["acc_end"] >= 1.0)),
        KeyNumber("mod: order-0 1 − MSE at its maximum (all order-0 signatures are equal)",
                  f"{fmt(b['collinear'])} at epoch {fb['collinear_epoch']}",
                  "≈ 1: embeddings collinear early; met if ≥ 0.9",
                  bool(b["collinear"] >= 0.9)),
        KeyNumber(f"mod: held-out order-1 probe, collinear phase → end (median over {len(mod)} seed(s))",
                  f"{fmt(b['probe_collinear'])} → {fmt(b['probe_end'])} (per seed at the end: "
                  f"{', '.join(fmt(p['probe_end']) for p in mod)}; median rise {fmt(n['rise'])}, seed-to-seed "
                  f"spread of the probe in the collinear phase {fmt(n['noise'])})",
                  "order-1 structure forms later: the median rise exceeds the collinear-phase spread, over ≥ 3 "
                  "seeds; the end value itself is not judged (it depends on when each seed leaves the plateau)",
                  n["rises"]),
        KeyNumber("mod: training accuracy at the end", f"{fmt(b['acc_end'])} (chance {fmt(fb['chance'])}; "
                  f"≥ 95 % first at epoch {fb['learned']})",
                  "not asserted: the paper's F8a finds attention-only aligns with order 1 but fails mod (N = 40)",
                  None),
        KeyNumber("value-path share of the update at initialization (add / mod)",
                  f"{fmt(a['value_share_init'])} / {fmt(b['value_share_init'])}",
                  "≈ 1 at small init (W_Q W_K tiny, so keys and query barely move; SPEC §6.3); met if ≥ 0.9",
                  bool(a["value_share_init"] >= 0.9 and b["value_share_init"] >= 0.9)),
    ]


def describe_arith(n: dict) -> str:
    """The paragraph of ``attention-arith`` from :func:`measure_arith`."""
    a, b, fa, fb = n["a"], n["b"], n["fa"], n["fb"]
    return (
        f"The attention-only model trained on add (N = 20) first lines up its embeddings with the order-0 label "
        f"signature (Pearson {fmt(a['peak'])} at epoch {fa['peak_epoch']}, loss still above halfway) and ends with "
        f"the held-out order-1 probe at {fmt(a['probe_end'])} against {fmt(a['end'])} for order 0 "
        f"(accuracy {fmt(a['acc_end'])}). On mod, where every order-0 signature is the same, the embeddings first "
        f"become collinear (1 − MSE {fmt(b['collinear'])} at epoch {fb['collinear_epoch']}) and the order-1 probe "
        f"then rises from {fmt(b['probe_collinear'])} to {fmt(b['probe_end'])} (medians over {len(n['mod'])} "
        f"seeds; where it ends varies from seed to seed), while accuracy ends at "
        f"{fmt(b['acc_end'])} (chance {fmt(fb['chance'])}): the staircase of signature orders appears in the "
        f"attention model too, and on mod the structure forms without the task being solved (compare F8a)."
    )


def draw_arith(paths: dict[str, Path], n: dict) -> Figures:
    """Per part: the staircase, the geometry early (add: the order-0 peak; mod: the collinear phase)
    and at the end, and the attention paths."""
    figures = {}
    for part, early in (("add", n["fa"]["peak_epoch"]), ("mod", n["fb"]["collinear_epoch"])):
        run = paths[part]
        figures[f"{part}_staircase.png"] = (f"{part}: alignment with each signature order (top) and loss/accuracy "
                                            "(bottom) over training.", run_figures.staircase_figure(run))
        figures[f"{part}_geometry.png"] = (f"{part}: embedding similarity early and at the end next to the signature "
                                           "geometries.",
                                           run_figures.geometry_figure(run, [max(early, 1),
                                                                             int(rundir.snapshot_times(run)[-1])]))
        figures[f"{part}_paths.png"] = (f"{part}: share of the value, key and query paths in the embeddings' update.",
                                        attention_figures.path_shares_figure(run))
    return figures


# ------------------------------------------------------------------------------ attention-parity (F5b)

def _parity_numbers(run: Path, m: int) -> dict:
    """Attention, norms, parity split and path shares of one member of an ``attention-parity`` run."""
    dataset = Run(run).dataset
    L, anchors, noise = dataset.seq_len, dataset.meta["groups"]["anchors"], dataset.meta["groups"]["noise"]
    table = read_attention_run(run)
    epochs, att_anchor = group_series(table, "anchors", m, "attention")
    _, att_noise = group_series(table, "noise", m, "attention")
    _, norm_anchor = group_series(table, "anchors", m, "norm")
    _, norm_noise = group_series(table, "noise", m, "norm")
    # "Attention has left the noise": 10 times below uniform attention 1/L.
    left = np.flatnonzero(att_noise <= 0.1 / L)
    i = int(left[0]) if left.size else len(epochs) - 1
    sigs = rundir.read_signatures(run)
    rows = np.array([int(np.flatnonzero(sigs.tokens == a)[0]) for a in anchors])  # anchors' rows in signatures.npz
    W = rundir.load_snapshot(run, int(epochs[-1]))["W_E"][m].astype(np.float64)
    split = float(compare(cosine_matrix(W[anchors]), signature_cosine(sigs.orders[0][rows]))["pearson"])
    noise_cos = mean_cosine(W[noise])
    return dict(L=L, att_anchor0=float(att_anchor[0]), att_anchor_end=float(att_anchor[-1]),
                att_noise0=float(att_noise[0]), att_noise_end=float(att_noise[-1]),
                left_epoch=int(epochs[i]) if left.size else None,
                uniform_epoch=int(epochs[att_anchor < 2 / L].max()),  # last snapshot with near-uniform attention
                norm_anchor0=float(norm_anchor[0]), norm_anchor_left=float(norm_anchor[i]),
                norm_anchor_end=float(norm_anchor[-1]),
                norm_noise0=float(norm_noise[0]), norm_noise_left=float(norm_noise[i]),
                norm_noise_end=float(norm_noise[-1]),
                split=split, noise_cos=noise_cos, last_epoch=int(epochs[-1]),
                value_share_init=_path_share(table, "anchors", m, 0, "value"),
                key_share_noise_end=_path_share(table, "noise", m, int(epochs[-1]), "key"))


def measure_parity(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of ``attention-parity``: per member (``per``), their medians (``med``), member 0
    (``first``), L, how much the anchor norms grow and the noise norms change once attention has left
    the noise, and whether it left for every member (``left``)."""
    per = [_parity_numbers(paths[""], m) for m in ms.members(paths[""])]
    med = ms.medians(per, [key for key in per[0] if key not in ("left_epoch", "uniform_epoch")])
    return dict(per=per, med=med, first=per[0], L=per[0]["L"],
                anchor_growth=med["norm_anchor_end"] / med["norm_anchor_left"],
                noise_change=med["norm_noise_end"] / med["norm_noise_left"] - 1,
                left=all(p["left_epoch"] is not None for p in per))


def judge_parity(n: dict) -> list[KeyNumber]:
    """The key numbers of ``attention-parity`` from :func:`measure_parity`."""
    med, f, L, noise_change = n["med"], n["first"], n["L"], n["noise_change"]
    return [
        KeyNumber("attention on the anchor (per sample), start → end",
                  f"{fmt(med['att_anchor0'])} → {fmt(med['att_anchor_end'])}",
                  f"grows from 1/L = {fmt(1 / L)} toward 1; met if ≥ 0.5", bool(med["att_anchor_end"] >= 0.5)),
        KeyNumber("attention on each noise position, start → end",
                  f"{fmt(med['att_noise0'])} → {fmt(med['att_noise_end'], 4)} "
                  f"(below 0.1/L from epoch {f['left_epoch']})",
                  f"falls toward 0; met if ≤ 0.1/L = {fmt(0.1 / L, 4)}", bool(med["att_noise_end"] <= 0.1 / L)),
        KeyNumber("mean anchor embedding norm: start → when attention has left the noise → end",
                  f"{fmt(med['norm_anchor0'])} → {fmt(med['norm_anchor_left'])} → "
                  f"{fmt(med['norm_anchor_end'])}",
                  "keeps growing once attention is on the anchors; met if end ≥ 1.5 × that point",
                  bool(n["left"] and n["anchor_growth"] >= 1.5)),
        KeyNumber("mean noise embedding norm: start → when attention has left the noise → end",
                  f"{fmt(med['norm_noise0'])} → {fmt(med['norm_noise_left'])} → {fmt(med['norm_noise_end'])} "
                  f"({noise_change:+.1%} after attention left)",
                  "stays flat once no attention reaches it; met if within ±10 % after that point",
                  bool(n["left"] and abs(noise_change) <= 0.1)),
        KeyNumber("parity split: Pearson of S^emb over anchors with their order-0 signature similarity, end",
                  fmt(med["split"]), "≥ 0.9 (anchors split by parity)", bool(med["split"] >= 0.9)),
        KeyNumber("noise embeddings: mean pairwise cosine at the end", fmt(med["noise_cos"]),
                  "high: noise embeddings point one way; met if ≥ 0.9", bool(med["noise_cos"] >= 0.9)),
        KeyNumber("value-path share of the anchors' update at initialization", fmt(med["value_share_init"]),
                  "≈ 1 at small init (W_Q W_K tiny); met if ≥ 0.9", bool(med["value_share_init"] >= 0.9)),
        KeyNumber("key-path share of the noise tokens' update at the end", fmt(med["key_share_noise_end"]),
                  "what still moves noise is their role as keys (being ignored)", None),
    ]


def describe_parity(n: dict) -> str:
    """The paragraph of ``attention-parity`` from :func:`measure_parity`."""
    med = n["med"]
    return (
        f"One anchor among {n['L'] - 1} noise tokens decides the label (its parity). Attention on the anchor goes from "
        f"{fmt(med['att_anchor0'])} (uniform) to {fmt(med['att_anchor_end'])}, and each noise position's from "
        f"{fmt(med['att_noise0'])} to {fmt(med['att_noise_end'], 4)}. Early on every embedding grows alike "
        f"(anchors {fmt(med['norm_anchor0'])} → {fmt(med['norm_anchor_left'])}, "
        f"noise {fmt(med['norm_noise0'])} → "
        f"{fmt(med['norm_noise_left'])}, while the label marginal is learned through the value path at uniform "
        f"attention); once attention has left the noise (epoch {n['first']['left_epoch']}) the noise norms change by "
        f"{n['noise_change']:+.1%} while the anchor norms grow {n['anchor_growth']:.1f}-fold: attention sets the rate. "
        "The anchors "
        f"split by parity (Pearson {fmt(med['split'])} with their order-0 signature similarity) and the noise "
        f"embeddings point one way (mean cosine {fmt(med['noise_cos'])})."
    )


def draw_parity(paths: dict[str, Path], n: dict) -> Figures:
    """Attention and norms over training, the attention paths, and the geometry at the last snapshot
    with near-uniform attention and at the end."""
    run, f = paths[""], n["first"]
    early = f["uniform_epoch"]
    return {
        "dynamics.png": ("Attention received by anchors and by noise tokens, and their mean embedding norms, over "
                         "training.", attention_figures.attention_dynamics_figure(run, seq_len=n["L"])),
        "paths.png": ("Share of the value, key and query paths in the update of the anchors' and the noise tokens' "
                      "embeddings.", attention_figures.path_shares_figure(run)),
        "geometry.png": ("S^emb of anchors (11..20) then noise (21..60) at the last snapshot with near-uniform "
                         "attention (anchor attention < 2/L) and at the end, "
                         "next to the signature geometries.",
                         run_figures.geometry_figure(run, [early, f["last_epoch"]])),
        "pca.png": ("PCA of the embeddings (anchors then noise) next to PCA of the signatures.",
                    run_figures.pca_figure(run, [early, f["last_epoch"]])),
    }


register(TrainedRecipe(
    name="attention-arith", figure="SPEC §8 F5a",
    expectation="attention-only model: add aligns with order 0 early and order 1 late; mod collinear early, order-1 "
                "structure later",
    cpu_time="≈ 20 s (3000 epochs; the paper's 10,000 with --set train.epochs=10000: ≈ 1 min)",
    paper=Paper("the attention-only model shows the same order-0 → order-1 staircase",
                "attention-only model (d = 128, d_k = 64), F_add and F_mod, N = 20, 10,000 epochs; "
                "small init, full dataset"),
    runs=lambda: {part: _config("attention-arith", TaskConfig(part, {"N": 20}), 1e-2, 3000,
                                members=MOD_SEEDS if part == "mod" else 1) for part in ("add", "mod")},
    analyses=("alignment", "attention_groups"),
    measure=measure_arith, judge=judge_arith, describe=describe_arith, draw=draw_arith,
    summary=lambda n: {"add": n["add"], "mod": n["mod"]},
))

register(TrainedRecipe(
    name="attention-parity", figure="SPEC §8 F5b",
    expectation="anchor attention and anchor norms grow, noise attention → 0 and noise norms stay; anchors split by "
                "parity, noise one direction",
    cpu_time="≈ 20 s",
    paper=Paper("attention sets the rate: anchors split by parity, noise embeddings one direction; "
                "attention on noise → ≈ 0, anchor attention and anchor norm grow, noise norm stays",
                "attention-only model; anchors 11..20, noise 21..60, L = 8, one anchor at a uniform "
                "position, y = a mod 2, 10,000 samples drawn once, 200 epochs"),
    runs=lambda: {"": _config("attention-parity", TaskConfig("parity", {}), 1e-3, 200, batch_size=1000, every=5)},
    analyses=("alignment", "attention_groups"),
    measure=measure_parity, judge=judge_parity, describe=describe_parity, draw=draw_parity, summary=members_summary,
))

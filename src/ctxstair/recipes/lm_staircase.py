"""``lm-staircase`` (SPEC §7, §8 F7): a small decoder LM trained from small initialization on a corpus,
with ρ_next, the prefix probe, the attention-path correlation and the path shares at every snapshot.

    ctxstair run lm-staircase --out runs/lm-staircase                          # synthetic corpus
    ctxstair run lm-staircase --set corpus.source=shakespeare --out runs/lm-shakespeare

The same as ``ctxstair lm train``. Defaults, and why, in docs/language-models.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ctxstair import rundir
from ctxstair.analysis import measures as ms
from ctxstair.analysis.lm_staircase import OUTPUT as LM_ANALYSIS
from ctxstair.analysis.lm_staircase import TOKENS_FILE, measure_series, read_lm_analysis
from ctxstair.config import apply_overrides
from ctxstair.config.lm import LMConfig
from ctxstair.lm.train import train_lm
from ctxstair.recipes.base import Figures, KeyNumber, Paper, TrainerRecipe, register
from ctxstair.report import lm_figures
from ctxstair.report.formats import fmt
from ctxstair.run import Run


def configure(overrides: dict[str, Any]) -> LMConfig:
    """The checked ``LMConfig`` of ``overrides`` (InputError naming a bad key or value)."""
    return apply_overrides(LMConfig(), overrides).validate()


def train(out: Path, overrides: dict[str, Any], resume: bool, force: bool) -> LMConfig:
    """Train the LM of ``LMConfig`` with ``overrides`` into ``out``; return its config."""
    cfg = configure(overrides)
    train_lm(cfg, out, resume=resume, force=force)
    return cfg


def measure(out: Path, paths: dict[str, Path]) -> dict:
    """The numbers of ``lm-staircase`` from its run directory: the config (``cfg``), the held-out loss
    by step (``val``); with ``lm_analysis.csv`` the course of ρ_next (``course``,
    :func:`ctxstair.analysis.measures.rho_next_course`) and its peak's index (``peak``), else None;
    unless only ρ_next was measured (``analysis.measures=rho_next``) the probe, attention-path and
    path-share numbers (``analysis``, :func:`_analysis_numbers`), else None."""
    run = paths[""]
    cfg = Run(run).config
    rows = rundir.read_metric_rows(run)
    numbers = dict(cfg=cfg, val={r["step"]: r["val_loss"] for r in rows if "val_loss" in r}, course=None,
                   analysis=None)
    if not (run / LM_ANALYSIS).is_file():
        return numbers
    course = ms.rho_next_course(run)
    peak = int(np.nanargmax(course["rho"]))
    numbers.update(course=course, peak=peak)
    if cfg.analysis.measures != "rho_next":
        numbers["analysis"] = _analysis_numbers(run, course["steps"], peak, course["steps"] <= cfg.train.steps / 3)
    return numbers


def judge(n: dict) -> list[KeyNumber]:
    """The key numbers of ``lm-staircase`` from :func:`measure`, as SPEC §8 F7 describes the staircase:
    ρ_next rises by ≥ 0.3 to a peak within the first third of training, then falls by ≥ 25 % of the
    peak to a level ≥ 0.1 while the held-out loss is still lower at the end than at the peak."""
    val = n["val"]
    loss_key = KeyNumber("held-out next-token loss, start → end",
                         f"{fmt(val[min(val)])} → {fmt(val[max(val)])} nats", "decreases",
                         bool(val[max(val)] < val[min(val)]))
    if n["course"] is None:
        return [loss_key]
    analysis = [] if n["analysis"] is None else _judge_analysis(n["analysis"], n["course"]["steps"], n["peak"])
    return _rho_next_keys(n["course"], n["peak"], n["cfg"].train.steps) + analysis + [loss_key]


def describe(n: dict) -> str:
    """The paragraph of ``lm-staircase`` from :func:`measure`."""
    if n["course"] is None:
        return "Trained without analysis (analysis.enabled=false)."
    cfg, steps, rho, peak = n["cfg"], n["course"]["steps"], n["course"]["rho"], n["peak"]
    paragraph = (
        f"A {cfg.model.n_layers}-layer decoder (d = {cfg.model.d_model}, γ = {cfg.model.init.gamma}) trained on "
        f"{cfg.corpus.source!r} ({cfg.corpus.tokenizer}, {cfg.corpus.vocab_size} tokens): the correlation of the "
        f"embedding geometry with the next-token signatures, ρ_next, starts at {fmt(rho[0])}, peaks at "
        f"{fmt(rho[peak])} at step {steps[peak]} and ends at {fmt(rho[-1])}.")
    if n["analysis"] is None:
        return paragraph + " Only ρ_next was measured (analysis.measures=rho_next)."
    return paragraph + _describe_analysis(n["analysis"], steps)


def draw(paths: dict[str, Path], n: dict) -> Figures:
    """The loss alone without analysis; else ρ_next, and the probe, attention-path and path-share
    figures when they were measured."""
    run = paths[""]
    if n["course"] is None:
        return {"loss.png": ("Loss over training.", lm_figures.loss_figure(run))}
    figures = {"rho_next.png": ("ρ_next over training, with the training and held-out loss.",
                                lm_figures.rho_next_figure(run))}
    if n["analysis"] is not None:
        figures.update({
            "probe.png": ("Held-out MSE of the prefix probe against its shuffled control.",
                          lm_figures.probe_figure(run)),
            "attention_path.png": ("Attention-path correlation per layer and snapshot.",
                                   lm_figures.attention_path_figure(run)),
            "path_shares.png": ("Direct, attention and MLP paths of the embeddings' update.",
                                lm_figures.path_shares_figure(run)),
        })
    return figures


def summarise(n: dict) -> dict:
    """``summary.json`` of ``lm-staircase``: ρ_next by step, and the probe's two MSE series when measured."""
    if n["course"] is None:
        return {}
    summary = {"steps": n["course"]["steps"], "rho_next": n["course"]["rho"]}
    if n["analysis"] is not None:
        summary.update(probe_heldout_mse=n["analysis"]["probe"], probe_shuffled_mse=n["analysis"]["shuffled"])
    return summary


def _rho_next_keys(course: dict, peak: int, steps_total: int) -> list[KeyNumber]:
    """The judged rows of ρ_next's course (:func:`ctxstair.analysis.measures.rho_next_course`), its peak
    at index ``peak``."""
    steps, rho = course["steps"], course["rho"]
    third = steps <= steps_total / 3
    return [
        KeyNumber("ρ_next (Pearson) at initialization", fmt(rho[0]), "≈ 0; met if |ρ| < 0.2",
                  bool(abs(rho[0]) < 0.2)),
        KeyNumber("ρ_next early peak", f"{fmt(rho[peak])} at step {steps[peak]} (of {steps_total}); "
                                       f"{fmt(course['peak_rise'])} above initialization",
                  "a clear peak early: ≥ 0.3 above initialization, in the first third of training",
                  bool(course["peak_rise"] >= 0.3 and third[peak])),
        KeyNumber("ρ_next at the end",
                  f"{fmt(rho[-1])}: {course['decay_fraction']:.0%} below the peak; held-out loss "
                  f"{fmt(course['val_loss_at_peak'])} at the peak → {fmt(course['val_loss_end'])} nats "
                  "at the end",
                  "decays by ≥ 25 % of the peak to a level ≥ 0.1 while the held-out loss keeps falling",
                  bool(course["decay_fraction"] >= 0.25 and rho[-1] >= 0.1
                       and course["val_loss_end"] < course["val_loss_at_peak"])),
    ]


def _analysis_numbers(run: Path, steps: np.ndarray, peak: int, first_third: np.ndarray) -> dict:
    """The probe, attention-path and path-share numbers of ``lm_analysis.csv``: the probe's held-out
    and shuffled MSE series, the attention-path correlation and its permutation null per layer
    (``attn``, ``null``), the layer and early snapshot where it stands highest above its null
    (``best_layer``, ``best``), the direct path's share (``direct``), the snapshots from the ρ_next
    peak on (``after_rise``) and the fraction of them where the probe beats its control."""
    table = read_lm_analysis(run)
    permutations = rundir.read_json(run, TOKENS_FILE, keys=("settings",))["settings"]["null_permutations"]
    _, probe = measure_series(table, "probe_heldout_mse")
    _, shuffled = measure_series(table, "probe_shuffled_mse")
    layers = sorted({p for p, m in zip(table["part"], table["measure"]) if m == "attention_path_corr"}, key=int)
    attn = {layer: measure_series(table, "attention_path_corr", layer)[1] for layer in layers}
    null = {layer: measure_series(table, "attention_path_null", layer)[1] for layer in layers}
    # the layer and early snapshot where the attention-path correlation stands highest above its null
    best_layer, best = max(((layer, int(np.argmax(np.where(first_third, attn[layer] - null[layer], -np.inf))))
                            for layer in layers), key=lambda lb: attn[lb[0]][lb[1]] - null[lb[0]][lb[1]])
    _, direct = measure_series(table, "path_share", "embed")
    after_rise = np.arange(len(steps)) >= max(peak, 1)  # from the peak on; never the initialization
    return dict(probe=probe, shuffled=shuffled, attn=attn, null=null, best_layer=best_layer, best=best,
                direct=direct, after_rise=after_rise, permutations=permutations,
                probe_wins=float(np.mean(probe[after_rise] < shuffled[after_rise])))


def _judge_analysis(a: dict, steps: np.ndarray, peak: int) -> list[KeyNumber]:
    """The rows of the probe, attention-path and path-share measures from :func:`_analysis_numbers`."""
    probe, shuffled, attn, null, best_layer, best = (a["probe"], a["shuffled"], a["attn"], a["null"],
                                                     a["best_layer"], a["best"])
    return [
        KeyNumber("prefix probe: held-out MSE vs shuffled control after the rise",
                  f"below the control at {a['probe_wins']:.0%} of the {int(a['after_rise'].sum())} snapshots from "
                  f"the peak on; at the end {fmt(probe[-1], 4)} vs {fmt(shuffled[-1], 4)}",
                  "below the shuffled control at most snapshots after the rise", bool(a["probe_wins"] > 0.5)),
        KeyNumber("attention-path correlation early (first third), best layer",
                  f"{fmt(attn[best_layer][best])} at step {steps[best]} (layer {best_layer}; permutation null "
                  f"{fmt(null[best_layer][best])}); at the end {fmt(attn[best_layer][-1])}",
                  f"clearly above chance early: above the largest |r| of {a['permutations']} token permutations",
                  bool(attn[best_layer][best] > null[best_layer][best])),
        KeyNumber("attention-path correlation at the ρ_next peak, per layer",
                  ", ".join(f"layer {k}: {fmt(v[peak])}" for k, v in attn.items()), "reported", None),
        KeyNumber("direct-path share of the embeddings' update, start → end",
                  f"{fmt(a['direct'][0])} → {fmt(a['direct'][-1])}",
                  "the direct path (next-token signature) dominates at small init (SPEC §6.4)", None),
    ]


def _describe_analysis(a: dict, steps: np.ndarray) -> str:
    """The paragraph's sentences on the probe and the attention path, from :func:`_analysis_numbers`."""
    attn, null, best_layer, best = a["attn"], a["null"], a["best_layer"], a["best"]
    return (
        f" The first-order prefix probe predicts the geometry of held-out tokens with MSE "
        f"{fmt(a['probe'][-1], 4)} against {fmt(a['shuffled'][-1], 4)} for shuffled signatures. Early on "
        f"(step {steps[best]}) the attention-path signature of layer {best_layer} correlates with W_O W_V w_α at "
        f"{fmt(attn[best_layer][best])} (permutation null {fmt(null[best_layer][best])}), "
        f"{fmt(attn[best_layer][-1])} at the end."
    )


register(TrainerRecipe(
    name="lm-staircase", figure="SPEC §8 F7",
    expectation="ρ_next rises from ≈ 0 to an early peak and decays to a lower non-zero level while the held-out loss "
                "falls; held-out prefix probe below its shuffled control; early attention-path correlation",
    cpu_time="≈ 2 min",
    paper=Paper("F7, measured on the paper's own LM: ρ_next rise–peak–decay; low held-out probe MSE; "
                "early attention-path correlation",
                "decoder LM from small init: 24 layers, hidden 1024, 16 heads × 96, MLP 4096, vocabulary "
                "60,416, AdamW peak lr 2.5e-4, batch 256, 36B tokens"),
    trainer=train,
    configure=configure,
    analyses=("lm_staircase",),
    measure=measure, judge=judge, describe=describe, draw=draw, summary=summarise,
))

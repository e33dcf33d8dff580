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
from ctxstair.analysis.lm_staircase import NULL_PERMUTATIONS, measure_series, read_lm_analysis
from ctxstair.config import apply_overrides
from ctxstair.config.lm import LMConfig
from ctxstair.lm.train import train_lm
from ctxstair.recipes.base import KeyNumber, Outcome, Recipe, register
from ctxstair.report import lm_figures
from ctxstair.report import measures as ms
from ctxstair.run import Run


def train(out: Path, overrides: dict[str, Any], resume: bool, force: bool) -> LMConfig:
    """Train the LM of ``LMConfig`` with ``overrides`` into ``out``; return its config."""
    cfg = apply_overrides(LMConfig(), overrides)
    train_lm(cfg, out, resume=resume, force=force)
    return cfg


def conclude(out: Path, paths: dict[str, Path]) -> Outcome:
    """The key numbers, paragraph and figures of this module's recipe, read from its run directories."""
    run = paths[""]
    cfg = Run(run).config
    rows = rundir.read_metric_rows(run)
    val = {r["step"]: r["val_loss"] for r in rows if "val_loss" in r}
    if not (run / "lm_analysis.csv").is_file():
        keys = [KeyNumber("held-out loss, start → end", f"{ms.fmt(val[min(val)])} → {ms.fmt(val[max(val)])}",
                          "decreases", val[max(val)] < val[min(val)])]
        return Outcome(keys, "Trained without analysis (analysis.enabled=false).",
                       {"loss.png": ("Loss over training.", lm_figures.loss_figure(run))})
    steps, rho = rundir.alignment_series(rundir.read_alignment(run), "next_token", 0)
    table = read_lm_analysis(run)
    _, probe = measure_series(table, "probe_heldout_mse")
    _, shuffled = measure_series(table, "probe_shuffled_mse")
    peak = int(np.nanargmax(rho))
    early = steps[peak] <= cfg.train.steps // 4
    layers = sorted({p for p, m in zip(table["part"], table["measure"]) if m == "attention_path_corr"}, key=int)
    first_quarter = steps <= cfg.train.steps // 4
    attn = {layer: measure_series(table, "attention_path_corr", layer)[1] for layer in layers}
    null = {layer: measure_series(table, "attention_path_null", layer)[1] for layer in layers}
    # the layer and early snapshot where the attention-path correlation stands highest above its null
    best_layer, best = max(((layer, int(np.argmax(np.where(first_quarter, attn[layer] - null[layer], -np.inf))))
                            for layer in layers), key=lambda lb: attn[lb[0]][lb[1]] - null[lb[0]][lb[1]])
    _, direct = measure_series(table, "path_share", "embed")
    later = slice(1, None)  # snapshot 0 is the initialization: no probe can be better than chance there
    probe_wins = float(np.mean(probe[later] < shuffled[later]))
    keys = [
        KeyNumber("ρ_next (Pearson) at initialization", ms.fmt(rho[0]), "≈ 0; met if |ρ| < 0.2",
                  bool(abs(rho[0]) < 0.2)),
        KeyNumber("ρ_next early peak", f"{ms.fmt(rho[peak])} at step {steps[peak]} (of {cfg.train.steps})",
                  "a clear peak early: ≥ 0.3 above initialization, in the first quarter of training",
                  bool(rho[peak] - rho[0] >= 0.3 and early)),
        KeyNumber("ρ_next at the end", f"{ms.fmt(rho[-1])} (drop {ms.fmt(rho[peak] - rho[-1])} from the peak)",
                  "decays to a lower non-zero level: ≥ 0.05 below the peak and ≥ 0.1",
                  bool(rho[peak] - rho[-1] >= 0.05 and rho[-1] >= 0.1)),
        KeyNumber("prefix probe: held-out MSE vs shuffled control at the end",
                  f"{ms.fmt(probe[-1], 4)} vs {ms.fmt(shuffled[-1], 4)} (below the control at {probe_wins:.0%} of the "
                  f"snapshots after initialization)", "below the shuffled control", bool(probe[-1] < shuffled[-1])),
        KeyNumber("attention-path correlation early (first quarter), best layer",
                  f"{ms.fmt(attn[best_layer][best])} at step {steps[best]} (layer {best_layer}; permutation null "
                  f"{ms.fmt(null[best_layer][best])}); at the end {ms.fmt(attn[best_layer][-1])}",
                  f"clearly above chance early: above the largest |r| of {NULL_PERMUTATIONS} token permutations",
                  bool(attn[best_layer][best] > null[best_layer][best])),
        KeyNumber("attention-path correlation at the ρ_next peak, per layer",
                  ", ".join(f"layer {k}: {ms.fmt(v[peak])}" for k, v in attn.items()), "reported", None),
        KeyNumber("direct-path share of the embeddings' update, start → end",
                  f"{ms.fmt(direct[0])} → {ms.fmt(direct[-1])}",
                  "the direct path (next-token signature) dominates at small init (SPEC §6.4)", None),
        KeyNumber("held-out next-token loss, start → end", f"{ms.fmt(val[min(val)])} → {ms.fmt(val[max(val)])} nats",
                  "decreases", bool(val[max(val)] < val[min(val)])),
    ]
    paragraph = (
        f"A {cfg.model.n_layers}-layer decoder (d = {cfg.model.d_model}, γ = {cfg.model.gamma}) trained on "
        f"{cfg.corpus.source!r}: the correlation of the embedding geometry with the next-token signatures, ρ_next, "
        f"starts at {ms.fmt(rho[0])}, peaks at {ms.fmt(rho[peak])} at step {steps[peak]} and ends at "
        f"{ms.fmt(rho[-1])}. The first-order prefix probe predicts the geometry of held-out tokens with MSE "
        f"{ms.fmt(probe[-1], 4)} against {ms.fmt(shuffled[-1], 4)} for shuffled signatures. Early on "
        f"(step {steps[best]}) the attention-path signature of layer {best_layer} correlates with W_O W_V w_α at "
        f"{ms.fmt(attn[best_layer][best])} (permutation null {ms.fmt(null[best_layer][best])}), "
        f"{ms.fmt(attn[best_layer][-1])} at the end."
    )
    figures = {
        "rho_next.png": ("ρ_next over training, with the training and held-out loss.", lm_figures.rho_next_figure(run)),
        "probe.png": ("Held-out MSE of the prefix probe against its shuffled control.", lm_figures.probe_figure(run)),
        "attention_path.png": ("Attention-path correlation per layer and snapshot.",
                               lm_figures.attention_path_figure(run)),
        "path_shares.png": ("Direct, attention and MLP paths of the embeddings' update.",
                            lm_figures.path_shares_figure(run)),
    }
    summary = {"steps": steps, "rho_next": rho, "probe_heldout_mse": probe, "probe_shuffled_mse": shuffled}
    return Outcome(keys, paragraph, figures, summary)


register(Recipe(
    name="lm-staircase", figure="SPEC §8 F7",
    expectation="ρ_next rises from ≈ 0 to an early peak and decays to a lower non-zero level; held-out prefix probe "
                "below its shuffled control; early attention-path correlation",
    cpu_time="≈ 2 min",
    runs=lambda: {},
    conclude=conclude,
    trainer=train,
    analyses=("lm_staircase",),
))

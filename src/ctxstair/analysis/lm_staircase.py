"""The staircase in a real language model (SPEC §7, §8 F7): measurements at every snapshot of an LM
run (:mod:`ctxstair.lm.train`), written to ``lm_analysis.csv`` and ``alignment.csv``.

Per snapshot step, over the eligible tokens T (the ``analysis.k`` most frequent word-like tokens of
the training windows):

* ``alignment.csv``, signature ``next_token``: ρ_next — Pearson and Spearman between the cosine
  matrices of the embeddings ``W_E[T]`` and of the next-token signatures ``φ^{y;nt}`` (SPEC §7);
* ``lm_analysis.csv`` (``step, measure, part, value``):
  ``probe_heldout_mse`` / ``probe_shuffled_mse`` — the first-order prefix probe's MSE on pairs of
  held-out tokens, and the same probe fitted to signatures shuffled across tokens (the control);
  ``attention_path_corr`` (part = layer ℓ) — correlation of the cosine matrices of the
  attention-path signature ``φ^{y;attn,ℓ}`` and of ``z_α = W_O^ℓ W_V^ℓ w_α``, and
  ``attention_path_null`` — the largest |r| over :data:`NULL_PERMUTATIONS` permutations of the
  tokens' signature rows (a correlation above it has p < 1/NULL_PERMUTATIONS); ``path_share`` (part =
  ``embed``, ``attn.ℓ``, ``mlp.ℓ``) — each path's share of the summed path norms of the update
  ``−∇_{W_E} loss`` restricted to the T rows (SPEC §6.4).

    python -c "from ctxstair.analysis import analyse; analyse('runs/lm-staircase', ['lm_staircase'])"
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ctxstair import numerics, rundir
from ctxstair.lm import analysis
from ctxstair.lm.analysis import NULL_PERMUTATIONS  # also imported from here (recipes.lm)
from ctxstair.lm.windows import corpus_windows, split_windows
from ctxstair.run import Run
from ctxstair.signatures import next_token_signature, prefix_signature

OUTPUT = "lm_analysis.csv"
LM_COLUMNS = ("step", "measure", "part", "value")


def analyse(run: Run) -> None:
    """Compute every measurement of the module docstring; write ``alignment.csv``, ``lm_analysis.csv``
    and ``lm_tokens.json`` (the eligible tokens and the probe's split). With
    ``analysis.measures=rho_next`` only ``alignment.csv`` and the tokens are written."""
    numerics.apply_to_torch()  # deterministic kernels for the probe's fits (also when called alone)
    out, cfg = run.path, run.config
    tokenizer, windows = corpus_windows(cfg, out)
    train, _ = split_windows(windows, cfg.train.seed)
    V, a = tokenizer.vocab_size, cfg.analysis
    tokens = analysis.eligible_tokens(train, tokenizer.word_like(np.arange(V)), a.k)
    phi_next = next_token_signature(train, V, tokens=tokens)  # (T, V)
    rundir.check_snapshot_progress(out)
    steps = run.snapshot_times()
    snapshots = [run.snapshot(s) for s in steps]
    W = np.stack([snap["W_E"].double().numpy()[tokens] for snap in snapshots])  # (S, T, d)

    rho = analysis.rho_next(W, phi_next)
    rundir.write_alignment(out, [
        {"member": 0, "epoch": step, "signature": "next_token", "pearson": rho["pearson"][i],
         "spearman": rho["spearman"][i], "one_minus_mse": float("nan"), "defined": bool(rho["defined"][i])}
        for i, step in enumerate(steps)])
    strings = [tokenizer.token_string(t) for t in tokens]
    if a.measures == "rho_next":
        rundir.write_json(out, "lm_tokens.json", {"tokens": tokens, "strings": strings})
        return

    # Labels of the prefix signature: the eligible tokens and as many again of the most frequent next
    # tokens; the probe's cost grows with T · labels · T per step (analyze-model uses 1000 labels).
    labels = analysis.prefix_labels(train, tokens, V, total=2 * tokens.size)
    phi_prefix = prefix_signature(train, tokens, labels, tokens)  # (T, Y, T)
    train_idx, heldout_idx = analysis.token_split(tokens.size, a.heldout_fraction, a.seed)
    probe_args = dict(steps=a.probe_steps, seed=a.seed, method=a.probe)
    rows = _rows(steps, "probe_heldout_mse", "",
                 analysis.prefix_probe(phi_prefix, W, train_idx, heldout_idx, **probe_args)["heldout_mse"])
    rows += _rows(steps, "probe_shuffled_mse", "",
                  analysis.shuffled_baseline(phi_prefix, W, train_idx, heldout_idx, **probe_args)["heldout_mse"])

    sample = torch.from_numpy(train[np.random.default_rng(a.seed).permutation(len(train))[: a.windows]])
    for step, snapshot in zip(steps, snapshots):  # read once above, for W
        # float32: the correlations and shares move by about 1e-7 from float64 at half the cost
        model = run.model(snapshot, torch.float32)
        rows += _attention_rows(model, step, sample, tokens, V)
        rows += _path_rows(model, step, sample, tokens)
    rundir.write_table(out, OUTPUT, LM_COLUMNS, rows)
    rundir.write_json(out, "lm_tokens.json", {"tokens": tokens, "strings": strings,
                                              "probe_train": tokens[train_idx], "probe_heldout": tokens[heldout_idx],
                                              "prefix_labels": int(labels.size)})


def _rows(steps: list[int], measure: str, part: str, values) -> list[dict]:
    return [{"step": s, "measure": measure, "part": part, "value": float(v)} for s, v in zip(steps, values)]


def _attention_rows(model, step: int, sample: torch.Tensor, tokens: np.ndarray, V: int) -> list[dict]:
    """``attention_path_corr`` and ``attention_path_null`` rows of every layer at one snapshot
    (:func:`ctxstair.lm.analysis.attention_path_scores`, SPEC §7)."""
    rows = []
    for layer, corr, null in analysis.attention_path_scores(model, sample, tokens, V, NULL_PERMUTATIONS):
        rows += [{"step": step, "measure": "attention_path_corr", "part": str(layer), "value": corr},
                 {"step": step, "measure": "attention_path_null", "part": str(layer), "value": null}]
    return rows


def _path_rows(model, step: int, sample: torch.Tensor, tokens: np.ndarray) -> list[dict]:
    """``path_share`` rows of the direct, attention and MLP paths at one snapshot
    (:func:`ctxstair.lm.analysis.path_shares`, SPEC §6.4)."""
    return [{"step": step, "measure": "path_share", "part": name, "value": share}
            for name, share in analysis.path_shares(model, sample, tokens).items()]


def read_lm_analysis(out: str | Path) -> dict[str, np.ndarray]:
    """``lm_analysis.csv`` as columns (``step`` int; ``measure``, ``part`` str; ``value`` float)."""
    return rundir.read_table(out, OUTPUT, ints=("step",), strings=("measure", "part"))


def measure_series(table: dict, measure: str, part: str = "") -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one measure (and part) of :func:`read_lm_analysis`'s table, by step."""
    keep = (table["measure"] == measure) & (table["part"] == part)
    order = np.argsort(table["step"][keep])
    return table["step"][keep][order], table["value"][keep][order]

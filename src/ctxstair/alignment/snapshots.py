"""Alignment of every snapshot of a run with the task's signatures: writes ``alignment.csv`` (SPEC §3).

For each member and snapshot epoch, over the task tokens T (``signatures.npz``):

* ``order0`` — ``compare(S^emb(t), S^sig,(0))``;
* ``order1_probe`` / ``order1_probe_zero_mean`` — held-out Pearson of the order-1 probe, free and
  with ``v ⟂ 1``; all snapshots of all members are fitted in one vectorised optimisation each;
* ``fourier_k<k>`` — ``compare(S^emb(t), S^sig,(1)(c_k))`` for ``k = 0..P/2``.

    python -c "from ctxstair.alignment.snapshots import analyse_run; analyse_run('runs/staircase-add')"
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import numerics, rundir
from ctxstair.alignment.fourier import fourier_alignment
from ctxstair.alignment.probe import probe_alignment
from ctxstair.alignment.similarity import compare, cosine_matrix, signature_cosine
from ctxstair.config import AnalysisConfig


def embedding_stack(run_dir: str | Path, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Embedding rows of ``tokens`` at every snapshot: (epochs (S,), W (K, S, T, d)); every file is
    checked against its SHA-256 and for a stuck writer (:func:`ctxstair.rundir.check_snapshot_progress`)."""
    rundir.check_snapshot_progress(run_dir)
    epochs = np.array(rundir.snapshot_epochs(run_dir))
    W = np.stack([rundir.load_snapshot(run_dir, int(e))["W_E"][:, tokens] for e in epochs], axis=1)
    return epochs, W.astype(np.float64)


def analyse_run(run_dir: str | Path, settings: AnalysisConfig | None = None) -> list[dict]:
    """Compute every alignment row of the run and write ``alignment.csv``; return the rows."""
    numerics.apply_to_torch()  # deterministic kernels for the probe's fits (also when called alone)
    settings = settings or AnalysisConfig()
    sigs = rundir.read_signatures(run_dir)
    tokens = sigs.tokens
    epochs, W = embedding_stack(run_dir, tokens)  # (K, S, T, d)
    K, S = W.shape[:2]
    rows: list[dict] = []

    def add(signature: str, values: dict) -> None:
        for k in range(K):
            for s in range(S):
                rows.append({"member": k, "epoch": int(epochs[s]), "signature": signature,
                             **{key: np.asarray(values[key])[k, s] for key in ("pearson", "spearman", "one_minus_mse", "defined")}})

    S_emb = np.stack([[cosine_matrix(W[k, s]) for s in range(S)] for k in range(K)])  # (K, S, T, T)
    add("order0", compare(S_emb, signature_cosine(sigs.orders[0])))
    if len(sigs.orders) > 1:
        phi1 = sigs.orders[1]
        flat = W.reshape(K * S, *W.shape[2:])
        for name, zero_mean in [("order1_probe", False), ("order1_probe_zero_mean", True)]:
            probe = probe_alignment(phi1, flat, folds=settings.probe_folds, steps=settings.probe_steps,
                                    lr=settings.probe_lr, seed=settings.probe_seed, zero_mean=zero_mean,
                                    restarts=settings.probe_restarts)
            r = probe.heldout_pearson.reshape(K, S)
            nan = np.full((K, S), np.nan)
            add(name, {"pearson": r, "spearman": nan, "one_minus_mse": nan, "defined": ~np.isnan(r)})
        fourier = fourier_alignment(phi1, flat)
        for j, k_freq in enumerate(fourier["ks"]):
            add(f"fourier_k{int(k_freq)}", {key: np.asarray(fourier[key])[:, j].reshape(K, S)
                                             for key in ("pearson", "spearman", "one_minus_mse", "defined")})
    rundir.write_alignment(run_dir, rows)
    return rows

"""Alignment of every snapshot of a run with the task's signatures: writes ``alignment.csv`` (SPEC §3).

For each member and snapshot epoch, over the task tokens T (``signatures.npz``):

* ``order0`` — ``compare(S^emb(t), S^sig,(0))``;
* ``order1_probe`` / ``order1_probe_zero_mean`` — held-out Pearson of the order-1 probe, free and
  with ``v ⟂ 1``; all snapshots of all members are fitted in one vectorised optimisation each;
* ``fourier_k<k>`` — ``compare(S^emb(t), S^sig,(1)(c_k))`` for ``k = 0..P/2``.

Probe settings are the run's ``analysis.*`` (:class:`ctxstair.config.AnalysisConfig`).

    python -c "from ctxstair.analysis import analyse; analyse('runs/staircase-add', ['alignment'])"
"""

from __future__ import annotations

import numpy as np

from ctxstair import numerics, rundir
from ctxstair.alignment import compare, cosine_matrix, fourier_alignment, probe_alignment, signature_cosine
from ctxstair.progress import Progress
from ctxstair.run import Run

OUTPUT = "alignment.csv"


def embedding_stack(run: Run, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Embedding rows of ``tokens`` at every snapshot: (epochs (S,), W (K, S, T, d)); every file is
    checked against its SHA-256 and for a stuck writer (:func:`ctxstair.rundir.check_snapshot_progress`)."""
    rundir.check_snapshot_progress(run.path)
    epochs = np.array(run.snapshot_times())
    W = np.stack([rundir.load_snapshot(run.path, int(e))["W_E"][:, tokens] for e in epochs], axis=1)
    return epochs, W.astype(np.float64)


def analyse(run: Run) -> None:
    """Compute every alignment row of the run and write ``alignment.csv``."""
    numerics.apply_to_torch()  # deterministic kernels for the probe's fits (also when called alone)
    settings = run.config.analysis
    sigs = run.signatures
    tokens = sigs.tokens
    epochs, W = embedding_stack(run, tokens)  # (K, S, T, d)
    K, S = W.shape[:2]
    rows: list[dict] = []

    def add(signature: str, values: dict) -> None:
        for k in range(K):
            for s in range(S):
                rows.append({"member": k, "epoch": int(epochs[s]), "signature": signature,
                             **{key: np.asarray(values[key])[k, s]
                                for key in ("pearson", "spearman", "one_minus_mse", "defined")}})

    S_emb = np.stack([[cosine_matrix(W[k, s]) for s in range(S)] for k in range(K)])  # (K, S, T, T)
    add("order0", compare(S_emb, signature_cosine(sigs.orders[0])))
    if len(sigs.orders) > 1:
        phi1 = sigs.orders[1]
        flat = W.reshape(K * S, *W.shape[2:])
        # The two probes' Adam steps are nearly all of the analysis's time.
        with Progress(2 * settings.probe_steps, f"{run.path.name}: alignment probes", "step") as bar:
            for name, zero_mean in [("order1_probe", False), ("order1_probe_zero_mean", True)]:
                probe = probe_alignment(phi1, flat, folds=settings.probe_folds, steps=settings.probe_steps,
                                        lr=settings.probe_lr, seed=settings.probe_seed, zero_mean=zero_mean,
                                        restarts=settings.probe_restarts, method=settings.probe, on_step=bar.update)
                r = probe.heldout_pearson.reshape(K, S)
                nan = np.full((K, S), np.nan)
                add(name, {"pearson": r, "spearman": nan, "one_minus_mse": nan, "defined": ~np.isnan(r)})
        fourier = fourier_alignment(phi1, flat)
        for j, k_freq in enumerate(fourier["ks"]):
            add(f"fourier_k{int(k_freq)}", {key: np.asarray(fourier[key])[:, j].reshape(K, S)
                                             for key in ("pearson", "spearman", "one_minus_mse", "defined")})
    rundir.write_alignment(run.path, rows)

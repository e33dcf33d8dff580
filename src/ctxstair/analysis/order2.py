"""Order 2 and the flattened order-1 geometry over training (SPEC §8 row C, App. C): ``order2.csv``.

The columns of ``alignment.csv``, per member and snapshot: ``order2_probe``, the held-out Pearson of
the order-2 probe h_α = φ^{y;2}_α ×_2 v_1 ×_3 v_2 (:func:`ctxstair.alignment.probe_alignment`, probe
settings from the run's ``analysis.*``), and ``order1_flat``, ``compare`` of the embedding geometry
with signature_cosine(φ^{y;1}).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.alignment import compare, cosine_matrix, probe_alignment, signature_cosine
from ctxstair.analysis.alignment import embedding_stack
from ctxstair.run import Run
from ctxstair.signatures import label_signature

OUTPUT = "order2.csv"


def analyse(run: Run) -> None:
    """Write ``order2.csv`` (module docstring); all snapshots are fitted at once."""
    dataset, sigs = run.dataset, run.signatures
    phi2 = label_signature(dataset.X, dataset.y, 2, dataset.vocab_size, tokens=sigs.tokens, labels=sigs.labels,
                           context=sigs.context)
    epochs, W = embedding_stack(run, sigs.tokens)  # (K, S, T, d)
    K, S = W.shape[:2]
    a = run.config.analysis
    probe = probe_alignment(phi2, W.reshape(K * S, *W.shape[2:]), folds=a.probe_folds, steps=a.probe_steps,
                            lr=a.probe_lr, seed=a.probe_seed, restarts=a.probe_restarts, method=a.probe)
    r2 = probe.heldout_pearson.reshape(K, S)
    flat = compare(np.stack([[cosine_matrix(W[k, s]) for s in range(S)] for k in range(K)]),
                   signature_cosine(sigs.orders[1]))
    rows = []
    for k in range(K):
        for s in range(S):
            base = {"member": k, "epoch": int(epochs[s])}
            rows.append({**base, "signature": "order2_probe", "pearson": r2[k, s], "spearman": np.nan,
                         "one_minus_mse": np.nan, "defined": bool(np.isfinite(r2[k, s]))})
            rows.append({**base, "signature": "order1_flat",
                         **{key: np.asarray(flat[key])[k, s]
                            for key in ("pearson", "spearman", "one_minus_mse", "defined")}})
    rundir.write_table(run.path, OUTPUT, rundir.ALIGNMENT_COLUMNS, rows)


def read_order2(run: Path) -> dict[str, np.ndarray]:
    """``order2.csv`` as columns (``defined`` as bool), like :func:`ctxstair.rundir.read_alignment`."""
    table = rundir.read_table(run, OUTPUT, ints=("member", "epoch"), strings=("signature", "defined"))
    return {**table, "defined": table["defined"] == "true"}

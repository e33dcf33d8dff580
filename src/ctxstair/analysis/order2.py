"""Order 2 and the flattened order-1 geometry over training (SPEC §8 row C, App. C): ``order2.csv``.

The columns of ``alignment.csv``, per member and snapshot, over all task tokens: ``order2_probe``,
the held-out Pearson of the order-2 probe h_α = φ^{y;2}_α ×_2 v_1 ×_3 v_2
(:func:`ctxstair.alignment.probe_alignment`, probe settings from the run's ``analysis.*``), and
``order1_flat``, ``compare`` of the embedding geometry with signature_cosine(φ^{y;1}).

When the task names token groups (``meta["groups"]``, e.g. ``two_anchor``'s ``context`` and
``anchors``), each group of at least :data:`MIN_GROUP` tokens is also analysed on its own —
signatures and embeddings of its tokens only, whether or not they are the task tokens: ``order1_probe@<group>``,
``order1_probe_zero_mean@<group>`` (``v ⟂ 1``: what order 1 adds beyond order 0, SPEC §3
"separating the orders") and ``order2_probe@<group>``. Both probes split the group's pairs into the
same folds (same seed), so ``order2_probe − order1_probe`` per snapshot is what order 2 adds beyond
order 1 on held-out pairs: the order-2 probe contains every order-1 probe (``v_1 = 1``), so a fit
can only match order 1 or do better on the pairs it trains on. (Projecting the order-2 vectors to
zero mean does not separate the orders here: a context axis holds anchors and context tokens, and a
zero-mean vector that is constant on the anchors still reproduces an order-1 probe.)
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
#: A group needs this many tokens (10 pairs) for the 5-fold pair split of the probe.
MIN_GROUP = 5


def analyse(run: Run) -> None:
    """Write ``order2.csv`` (module docstring); all snapshots are fitted at once."""
    dataset, sigs = run.dataset, run.signatures
    epochs, W = embedding_stack(run, sigs.tokens)  # (K, S, T, d)
    K, S = W.shape[:2]
    phi2 = _signature(dataset, sigs, 2, sigs.tokens)
    series = {"order2_probe": _probe(run, phi2, W, zero_mean=False)}
    flat = compare(np.stack([[cosine_matrix(W[k, s]) for s in range(S)] for k in range(K)]),
                   signature_cosine(sigs.orders[1]))
    for group, ids in dataset.meta.get("groups", {}).items():
        ids = np.asarray(ids)
        if ids.size < MIN_GROUP:
            continue
        _, W_group = embedding_stack(run, ids)
        phi1 = _signature(dataset, sigs, 1, ids)
        series[f"order1_probe@{group}"] = _probe(run, phi1, W_group, zero_mean=False)
        series[f"order1_probe_zero_mean@{group}"] = _probe(run, phi1, W_group, zero_mean=True)
        # A group that is the task's token set (two_anchor with analysed=anchors) has its order-2 probe already.
        series[f"order2_probe@{group}"] = (series["order2_probe"] if np.array_equal(ids, sigs.tokens) else
                                           _probe(run, _signature(dataset, sigs, 2, ids), W_group, zero_mean=False))
    rows = []
    for k in range(K):
        for s in range(S):
            base = {"member": k, "epoch": int(epochs[s])}
            for name, r in series.items():
                rows.append({**base, "signature": name, "pearson": r[k, s], "spearman": np.nan,
                             "one_minus_mse": np.nan, "defined": bool(np.isfinite(r[k, s]))})
            rows.append({**base, "signature": "order1_flat",
                         **{key: np.asarray(flat[key])[k, s]
                            for key in ("pearson", "spearman", "one_minus_mse", "defined")}})
    rundir.write_table(run.path, OUTPUT, rundir.ALIGNMENT_COLUMNS, rows)


def _signature(dataset, sigs, order: int, tokens: np.ndarray) -> np.ndarray:
    """φ^{y;order} of ``tokens`` over the run's labels and context tokens."""
    return label_signature(dataset.X, dataset.y, order, dataset.vocab_size, tokens=tokens, labels=sigs.labels,
                           context=sigs.context)


def _probe(run: Run, phi: np.ndarray, W: np.ndarray, zero_mean: bool) -> np.ndarray:
    """(K, S) held-out Pearson of the probe of ``phi`` on the embedding stack ``W`` (K, S, T, d)."""
    K, S = W.shape[:2]
    a = run.config.analysis
    probe = probe_alignment(phi, W.reshape(K * S, *W.shape[2:]), folds=a.probe_folds, steps=a.probe_steps,
                            lr=a.probe_lr, seed=a.probe_seed, restarts=a.probe_restarts, method=a.probe,
                            zero_mean=zero_mean)
    return probe.heldout_pearson.reshape(K, S)


def read_order2(run: Path) -> dict[str, np.ndarray]:
    """``order2.csv`` as columns (``defined`` as bool), like :func:`ctxstair.rundir.read_alignment`."""
    table = rundir.read_table(run, OUTPUT, ints=("member", "epoch"), strings=("signature", "defined"))
    return {**table, "defined": table["defined"] == "true"}

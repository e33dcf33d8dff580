"""Which signature order drives the embeddings when: order shares over training (SPEC §6.1).

For every snapshot of a CBOW run and every ensemble member, the label-driven gradient of the task
tokens' embeddings is split into its order-m terms (:func:`cbow_label_terms` for a polynomial
activation, :func:`cbow_terms_with_fit` for ReLU/GELU/tanh), and each term is compared with the
actual update ``−∇ mean loss`` (autograd, exact softmax). Written to ``theory.csv``:

    member, epoch, order, norm, share, cosine_with_update, relative_residual

``norm`` is the Frobenius norm of the order-m term over the task tokens and coordinates; ``share``
is that norm divided by the sum over orders; ``cosine_with_update`` the cosine between the term and
the actual update (both flattened over tokens × coordinates); ``relative_residual`` (same for every
order of one snapshot) is ‖autograd label gradient − Σ terms‖ / ‖autograd label gradient‖, zero up
to rounding for a polynomial activation and the fit error otherwise.

    python -c "from ctxstair.theory.shares import analyse_order_shares; analyse_order_shares('runs/staircase-add')"
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from ctxstair import rundir, tasks
from ctxstair.config import load_yaml
from ctxstair.io import atomic_write_text
from ctxstair.theory.activation_fit import cbow_terms_with_fit
from ctxstair.theory.cbow_terms import cbow_label_terms
from ctxstair.theory.reference import embedding_gradient

THEORY_COLUMNS = ("member", "epoch", "order", "norm", "share", "cosine_with_update", "relative_residual")


def order_shares(W_E: np.ndarray, W_U: np.ndarray, X: np.ndarray, y: np.ndarray, tokens: np.ndarray,
                 activation: str, coeffs=(), power: int = 2) -> list[dict]:
    """Per-order norm, share and cosine with the actual update for one model (W_E, W_U (V, d))."""
    W_E, W_U = np.asarray(W_E, dtype=np.float64), np.asarray(W_U, dtype=np.float64)
    if activation == "poly":
        terms = cbow_label_terms(W_E, W_U, X, y, coeffs, tokens)
        label = embedding_gradient(W_E, W_U, X, y, "label", activation, coeffs)[tokens]
        residual = np.linalg.norm(label - terms.sum(axis=1)) / max(np.linalg.norm(label), 1e-300)
    elif activation == "monomial":
        coeffs = [0.0] * (power - 1) + [1.0]
        return order_shares(W_E, W_U, X, y, tokens, "poly", coeffs)
    else:
        fit = cbow_terms_with_fit(W_E, W_U, X, y, activation, tokens=tokens)
        terms, residual = fit.terms, fit.relative_residual
    update = -embedding_gradient(W_E, W_U, X, y, "loss", activation, coeffs, power)[tokens].ravel()
    norms = np.linalg.norm(terms, axis=(0, 2))
    flat = terms.transpose(1, 0, 2).reshape(terms.shape[1], -1)
    denom = norms * np.linalg.norm(update)
    cosines = np.divide(flat @ update, denom, out=np.full(norms.size, np.nan), where=denom > 0)
    total = norms.sum()
    return [{"order": m, "norm": float(norms[m]), "share": float(norms[m] / total) if total > 0 else float("nan"),
             "cosine_with_update": float(cosines[m]), "relative_residual": float(residual)}
            for m in range(norms.size)]


def analyse_order_shares(run_dir: str | Path) -> list[dict]:
    """Order shares at every snapshot of every member of a CBOW run; writes ``theory.csv``."""
    run_dir = Path(run_dir)
    cfg = load_yaml((run_dir / "config.yaml").read_text())
    dataset = tasks.make(cfg.task.name, **cfg.task.params)
    rows = []
    for epoch in rundir.snapshot_epochs(run_dir):
        snapshot = rundir.load_snapshot(run_dir, epoch)
        for member in range(snapshot["W_E"].shape[0]):
            for row in order_shares(snapshot["W_E"][member], snapshot["W_U"][member], dataset.X, dataset.y,
                                    dataset.tokens, cfg.model.activation, cfg.model.coeffs, cfg.model.power):
                rows.append({"member": member, "epoch": epoch, **row})
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=THEORY_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()} for row in rows)
    atomic_write_text(run_dir / "theory.csv", buffer.getvalue())
    return rows


def read_order_shares(run_dir: str | Path) -> dict[str, np.ndarray]:
    """``theory.csv`` as columns (ints for member/epoch/order, floats otherwise)."""
    text = (Path(run_dir) / "theory.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    return {key: np.array([(int if key in ("member", "epoch", "order") else float)(r[key]) for r in rows])
            for key in THEORY_COLUMNS}

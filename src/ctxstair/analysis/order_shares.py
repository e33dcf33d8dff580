"""Order shares over training (SPEC §6.1): ``theory.csv`` of a CBOW run.

For every snapshot, ensemble member and signature order m, the columns

    member, epoch, order, norm, share, cosine_with_update, relative_residual

of :func:`ctxstair.theory.shares.order_shares`: the order-m term of the label-driven gradient of the
task tokens' embeddings against the actual update.

    python -c "from ctxstair.analysis import analyse; analyse('runs/staircase-add', ['order_shares'])"
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.errors import InputError
from ctxstair.io import atomic_write_text
from ctxstair.run import Run
from ctxstair.theory.shares import stacked_order_shares

OUTPUT = "theory.csv"
THEORY_COLUMNS = ("member", "epoch", "order", "norm", "share", "cosine_with_update", "relative_residual")


def analyse(run: Run) -> None:
    """Order shares at every snapshot of every member of a CBOW run; writes ``theory.csv``."""
    cfg, dataset = run.config, run.dataset
    if cfg.model.bias or cfg.model.pool != "sum":
        raise InputError(f"order shares (SPEC §6.1) are derived for f = W_U σ(Σ_i w_(x_i)): they need "
                         f"model.bias=false and model.pool=sum, got bias={cfg.model.bias}, pool={cfg.model.pool}")
    epochs = run.snapshot_times()
    snapshots = [rundir.load_snapshot(run.path, epoch) for epoch in epochs]
    W_E, W_U = (np.concatenate([snapshot[name] for snapshot in snapshots]) for name in ("W_E", "W_U"))  # (S K, V, d)
    shares = stacked_order_shares(W_E, W_U, dataset.X, dataset.y, dataset.tokens, cfg.model.activation,
                                  cfg.model.coeffs, cfg.model.power)
    members = snapshots[0]["W_E"].shape[0]
    rows = [{"member": i % members, "epoch": epochs[i // members], **row}
            for i, model_rows in enumerate(shares) for row in model_rows]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=THEORY_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: (repr(v) if isinstance(v, float) else v) for k, v in row.items()} for row in rows)
    atomic_write_text(run.path / OUTPUT, buffer.getvalue())


def read_order_shares(run_dir: str | Path) -> dict[str, np.ndarray]:
    """``theory.csv`` as columns (ints for member/epoch/order, floats otherwise)."""
    text = (Path(run_dir) / OUTPUT).read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    return {key: np.array([(int if key in ("member", "epoch", "order") else float)(r[key]) for r in rows])
            for key in THEORY_COLUMNS}

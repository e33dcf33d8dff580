"""Attention, embedding norms and gradient paths per token group over training (SPEC §6.3, §8 F5b):
``attention.csv`` of an attention-only run, one row per snapshot, member and group with the columns
of :data:`ctxstair.theory.attention_run.ATTENTION_COLUMNS` (:func:`~ctxstair.theory.attention_run.group_rows`).

    python -c "from ctxstair.analysis import analyse; analyse('runs/attention-parity', ['attention_groups'])"
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.errors import InputError
from ctxstair.progress import Progress
from ctxstair.run import Run
from ctxstair.theory.attention_run import ATTENTION_COLUMNS, group_rows, token_groups

OUTPUT = "attention.csv"


def analyse(run: Run) -> None:
    """Rows of :func:`~ctxstair.theory.attention_run.group_rows` for every snapshot and member of an
    attention run; writes ``attention.csv``."""
    if run.config.model.kind != "attention":
        raise InputError(f"{run.path} is a {run.config.model.kind!r} run; "
                         "attention analysis needs model.kind=attention")
    dataset = run.dataset
    groups = token_groups(dataset)
    rows, epochs = [], run.snapshot_times()
    with Progress(len(epochs), f"{run.path.name}: attention groups", "snapshot") as bar:
        for epoch in epochs:
            snapshot = rundir.load_snapshot(run.path, epoch)
            for member in range(snapshot["W_E"].shape[0]):
                params = {name: tensor[member] for name, tensor in snapshot.items()}
                rows += [{"member": member, "epoch": epoch, **row}
                         for row in group_rows(params, dataset.X, dataset.y, groups)]
            bar.update(1)
    rundir.write_table(run.path, OUTPUT, ATTENTION_COLUMNS, rows)


def read_attention_run(run_dir: str | Path) -> dict[str, np.ndarray]:
    """``attention.csv`` as columns (``member``, ``epoch`` int; ``group`` str; floats otherwise)."""
    return rundir.read_table(run_dir, OUTPUT, ints=("member", "epoch"), strings=("group",))


def group_series(table: dict[str, np.ndarray], group: str, member: int, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(epochs, values) of one group and member from :func:`read_attention_run`'s table, by epoch."""
    keep = (table["group"] == group) & (table["member"] == member)
    order = np.argsort(table["epoch"][keep])
    return table["epoch"][keep][order], table[column][keep][order]

"""The staircase in a real language model (SPEC §7, §8 F7): the LM staircase measurement
(:mod:`ctxstair.measure.staircase`) at every snapshot of an LM run (:mod:`ctxstair.lm.train`), written to
``lm_analysis.csv`` and ``lm_tokens.json``.

The setup is the run's own corpus: its training windows (the held-out windows of the validation
loss are left out), its tokenizer, V = the tokenizer's vocabulary, and the settings of the config's
``analysis`` section (:func:`ctxstair.measure.staircase.run_setup`). Per snapshot step, ``lm_analysis.csv``
(``step, measure, part, value``) holds the rows of the one schema (:mod:`ctxstair.measure.schema`):
``rho_next`` and ``rho_next_spearman``; ``probe_heldout_mse`` and ``probe_shuffled_mse``;
``attention_path_corr`` and ``attention_path_null`` with the layer as part; ``path_share`` with
the path (``embed``, ``attn.ℓ``, ``mlp.ℓ``) as part; ``unembedding_alignment``. With
``analysis.measures=rho_next`` only the ρ_next rows are written. ``lm_tokens.json`` records the
setup (:meth:`StaircaseSetup.record`).

    python -c "from ctxstair.analysis import analyse; analyse('runs/lm-staircase', ['lm_staircase'])"
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from ctxstair import numerics, rundir
from ctxstair.measure.estimators import States
from ctxstair.measure.schema import TABLE_COLUMNS, table_rows
from ctxstair.measure.staircase import run_setup
from ctxstair.run import Run

OUTPUT = "lm_analysis.csv"
#: The record of the run's setup (:meth:`ctxstair.measure.staircase.StaircaseSetup.record`).
TOKENS_FILE = "lm_tokens.json"


def analyse(run: Run) -> None:
    """Measure every snapshot of an LM run (module docstring); write ``lm_analysis.csv`` and
    ``lm_tokens.json``. The probe fits all snapshots in one vectorised optimisation; the path
    measures run on each snapshot's model in float32 (the correlations and shares move by about
    1e-7 from float64 at half the cost)."""
    numerics.apply_to_torch()  # deterministic kernels for the probe's fits (also when called alone)
    setup = run_setup(run)
    rundir.check_snapshot_progress(run.path)
    steps = run.snapshot_times()
    snapshots = [run.snapshot(s) for s in steps]
    key = run.config.model.embedding_key()
    W = np.stack([snap[key].double().numpy()[setup.tokens] for snap in snapshots])  # (S, T, d)
    # The networks (for the measures that need one) from the snapshots read once above, for W.
    rows = setup.measure(States(setup.vocab_size, W, model=lambda i: run.model(snapshots[i], torch.float32)),
                         report=f"{run.path.name}: lm staircase")
    rundir.write_table(run.path, OUTPUT, TABLE_COLUMNS, table_rows(steps, rows))
    rundir.write_json(run.path, TOKENS_FILE, setup.record())


def read_lm_analysis(out: str | Path) -> dict[str, np.ndarray]:
    """``lm_analysis.csv`` as columns (``step`` int; ``measure``, ``part`` str; ``value`` float)."""
    return rundir.read_table(out, OUTPUT, ints=("step",), strings=("measure", "part"))


def measure_series(table: dict, measure: str, part: str = "") -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one measure (and part) of :func:`read_lm_analysis`'s table, by step."""
    keep = (table["measure"] == measure) & (table["part"] == part)
    order = np.argsort(table["step"][keep], kind="stable")
    return table["step"][keep][order], table["value"][keep][order]

"""The one schema of the LM staircase numbers (SPEC §6.4, §7), numpy only, so that readers of the
files (reports, notebooks, the explorer) need nothing else.

A measurement (:mod:`ctxstair.measure.staircase`) returns a row per model state: a dict ``name -> float``
whose names are a measure of :data:`MEASURES`, with ``/<part>`` for the per-layer and per-path ones
(:func:`key`). ``lm_analysis.csv`` holds the rows of a run as ``(step, measure, part, value)``,
``analysis.json`` one dict per checkpoint, and the monitor logs ``staircase/<name>``.

==========================  ==================================================================
name                        what
==========================  ==================================================================
``rho_next``                ρ_next: Pearson of S^emb with S^next over the pairs a < b (SPEC §7)
``rho_next_spearman``       the same, Spearman
``probe_heldout_mse``       the first-order prefix probe's MSE on pairs of held-out tokens (SPEC §7)
``probe_shuffled_mse``      the same probe on signatures shuffled across tokens (the control)
``attention_path_corr/ℓ``   the attention-path signature of layer ℓ vs ``W_O W_V w_α`` (SPEC §7)
``attention_path_null/ℓ``   its permutation null: the largest |r| over token permutations
``path_share/<path>``       a path's share of the embedding update: ``embed``, ``attn.ℓ``,
                            ``mlp.ℓ``, and ``unembed`` where the unembedding is tied to the
                            embedding (SPEC §6.4)
``unembedding_alignment``   R_cos(W_U, φ^pre): Pearson of the unembedding rows' cosines with the
                            previous-token signatures' cosines over the pairs a < b (SPEC §7)
==========================  ==================================================================

NaN stands for "undefined" (a constant cosine triangle): an empty CSV field, ``null`` in JSON.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

RHO_NEXT, RHO_NEXT_SPEARMAN = "rho_next", "rho_next_spearman"
PROBE, SHUFFLED = "probe_heldout_mse", "probe_shuffled_mse"
ATTENTION_CORR, ATTENTION_NULL, PATH_SHARE = "attention_path_corr", "attention_path_null", "path_share"
UNEMBEDDING_ALIGNMENT = "unembedding_alignment"
#: Every measure, in the order a row lists them.
MEASURES = (RHO_NEXT, RHO_NEXT_SPEARMAN, PROBE, SHUFFLED, ATTENTION_CORR, ATTENTION_NULL, PATH_SHARE,
            UNEMBEDDING_ALIGNMENT)
#: The columns of ``lm_analysis.csv``.
TABLE_COLUMNS = ("step", "measure", "part", "value")
#: The prefix of the monitor's log keys (``staircase/rho_next``, ``staircase/attention_path_corr/0``...).
LOG_PREFIX = "staircase/"


def key(measure: str, part: str = "") -> str:
    """The name of a measure in a row: ``measure``, or ``measure/part`` for a layer or a path."""
    return f"{measure}/{part}" if part else measure


def split_key(name: str) -> tuple[str, str]:
    """``(measure, part)`` of a row's name (:func:`key`); part is '' for ρ_next and the probe."""
    measure, _, part = name.partition("/")
    return measure, part


def table_rows(steps: Sequence[int], rows: Sequence[dict]) -> list[dict]:
    """The ``lm_analysis.csv`` rows (:data:`TABLE_COLUMNS`) of one row per step: by step, then in the
    row's order."""
    return [{"step": int(step), "measure": split_key(name)[0], "part": split_key(name)[1], "value": float(value)}
            for step, row in zip(steps, rows) for name, value in row.items()]


def series(rows: Sequence[dict]) -> dict[str, np.ndarray]:
    """Rows (one per model state) as name -> float array over them, NaN where a row lacks the name (the
    expensive parts are measured at fewer states); names in first-seen order."""
    names = list(dict.fromkeys(name for row in rows for name in row))
    return {name: np.array([np.nan if row.get(name) is None else row[name] for row in rows], dtype=np.float64)
            for name in names}


def parts(names: Iterable[str], measure: str) -> list[str]:
    """The parts of ``measure`` among row names, in the residual stream's order: layers by number;
    paths ``embed`` first, then ``attn.ℓ`` and ``mlp.ℓ`` by layer, then ``unembed``."""
    def position(part: str) -> tuple[int, int, int]:
        if part.isdigit():
            return (1, int(part), 0)
        if part == "unembed":
            return (2, 0, 0)
        kind, _, layer = part.partition(".")
        return (0, 0, 0) if part == "embed" else (1, int(layer) if layer.isdigit() else 0, 0 if kind == "attn" else 1)

    found = {split_key(name)[1] for name in names if split_key(name)[0] == measure}
    return sorted(found, key=position)

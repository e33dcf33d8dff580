"""The named measures of SPEC §3 and §8: numbers read off a run directory (series per member, peaks,
onsets), which recipes, their figures and sweeps share. Every function reads files only, so a report
can be rebuilt from the run directory; how a number is written in a report is
:mod:`ctxstair.report.formats`.

The named measures the recipes share are defined here, once:

* the **order-0 peak** (:func:`order0_peak`): the largest order-0 Pearson among the snapshots taken
  while the loss is still above halfway from its start to its end (:func:`halfway_loss`) — the
  early peak of SPEC §8 F3, not the global maximum (a sweep's ``order0_max``,
  :mod:`ctxstair.sweep.cells`);
* the **collinear phase** (:func:`collinear_phase`): where the order-0 1 − MSE peaks, on a task
  whose order-0 signatures are all equal (SPEC §3), and the order-1 probe there
  (:func:`collinear_phase_probe`, :func:`probe_rise`);
* the **learning onset** (:func:`learned_epoch`): the first epoch with training accuracy
  ≥ :data:`LEARNED_ACC`, and the median onset over seeds (:func:`median_onset`);
* **chance** (:func:`chance_accuracy`): one over the number of labels that occur;
* the best Fourier frequency (:func:`best_frequency`) and the medians over members (:func:`median`,
  :func:`medians`);
* the course of ρ_next in a language model's run (:func:`rho_next_course`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.analysis.lm_staircase import measure_series, read_lm_analysis
from ctxstair.measure.schema import RHO_NEXT


def metric_series(run_dir: Path, member: int, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(epochs, values) of ``loss`` or ``acc`` of one member, by epoch."""
    table = rundir.read_metrics(run_dir)
    keep = table["member"] == member
    order = np.argsort(table["epoch"][keep])
    return table["epoch"][keep][order], table[column][keep][order]


def value_at(epochs: np.ndarray, values: np.ndarray, epoch: int) -> float:
    """The value at ``epoch`` (NaN if that epoch is absent)."""
    hit = np.flatnonzero(epochs == epoch)
    return float(values[hit[0]]) if hit.size else float("nan")


def first_epoch(epochs: np.ndarray, condition: np.ndarray) -> int | None:
    """First epoch where ``condition`` holds, or None."""
    hit = np.flatnonzero(condition)
    return int(epochs[hit[0]]) if hit.size else None


#: Training accuracy at which a task counts as learned (SPEC §8 F9's onset; "≥ 95 %" in the reports).
LEARNED_ACC = 0.95


def learned_epoch(epochs: np.ndarray, acc: np.ndarray, threshold: float = LEARNED_ACC) -> int | None:
    """The learning onset: first epoch with training accuracy ``acc`` ≥ ``threshold`` (``epochs``
    and ``acc`` (E,) from :func:`metric_series`), or None if it never gets there."""
    return first_epoch(epochs, acc >= threshold)


def median_onset(onsets: list[int | None]) -> float:
    """Median of learning onsets over seeds, a seed that never learned (None) counting as infinitely late."""
    return float(np.median([np.inf if onset is None else onset for onset in onsets]))


def chance_accuracy(run_dir: Path) -> float:
    """Accuracy of a uniform guess among the labels that occur in the run's data (``signatures.npz``)."""
    return 1.0 / len(rundir.read_signatures(run_dir).labels)


def halfway_loss(loss: np.ndarray) -> float:
    """The loss halfway from its start to its end: ``(loss[0] + loss[-1]) / 2`` of ``loss`` (E,) in epoch order."""
    return float((loss[0] + loss[-1]) / 2)


def order0_peak(run_dir: Path, member: int, table: dict | None = None) -> int:
    """The order-0 peak of one member (SPEC §8 F3, "ρ_(0) ≈ 1 early"): the index, among the snapshots
    of its order-0 series (:func:`ctxstair.rundir.alignment_series`), of the largest order-0 Pearson
    taken while the loss is still above :func:`halfway_loss`. ``table``: the run's
    :func:`ctxstair.rundir.read_alignment`, when read already."""
    table = rundir.read_alignment(run_dir) if table is None else table
    epochs, r0 = rundir.alignment_series(table, "order0", member)
    loss_epochs, loss = metric_series(run_dir, member, "loss")
    halfway = halfway_loss(loss)
    before_halfway = np.array([value_at(loss_epochs, loss, e) > halfway for e in epochs])
    return int(np.nanargmax(np.where(before_halfway, r0, -np.inf)))


def member_seeds(run_dir: Path) -> list[int]:
    """Seed of each ensemble member, from ``members.csv``."""
    return [int(s) for s in rundir.read_table(run_dir, "members.csv", ints=("member", "seed"))["seed"]]


def members(run_dir: Path) -> list[int]:
    """Member indices of a run."""
    return sorted(set(rundir.read_metrics(run_dir)["member"].tolist()))


def fourier_profile(run_dir: Path, member: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
    """(ks, Pearson) of the Fourier alignment at one snapshot epoch (NaN where undefined)."""
    table = rundir.read_alignment(run_dir)
    names = sorted({s for s in table["signature"] if s.startswith("fourier_k")}, key=lambda s: int(s[9:]))
    ks = np.array([int(s[9:]) for s in names])
    values = np.array([value_at(*rundir.alignment_series(table, s, member), epoch) for s in names])
    return ks, values


def best_frequency(ks: np.ndarray, values: np.ndarray, k_min: int = 1) -> tuple[int, float]:
    """(k*, r) with k* = argmax over k >= ``k_min`` of the Fourier alignment (SPEC §8 F3: k >= 1;
    App. D: k > 10, i.e. ``k_min=11``)."""
    allowed = ks >= k_min
    j = int(np.nanargmax(np.where(allowed, values, -np.inf)))
    return int(ks[j]), float(values[j])


def median(values: list[float]) -> float:
    """Median over ensemble members (NaN-aware); NaN, without a warning, when no member has a value
    (e.g. a run too short for a measure to be defined)."""
    values = np.asarray(values, dtype=float)
    return float("nan") if np.isnan(values).all() else float(np.nanmedian(values))


def medians(per_member: list[dict], keys: Iterable[str]) -> dict[str, float]:
    """Key -> :func:`median` over the members' dicts ``per_member`` of each of ``keys``."""
    return {key: median([p[key] for p in per_member]) for key in keys}


#: Fewest seeds over which a number in a chaotic regime is judged (docs/reliability.md, "Audit").
MIN_SEEDS = 3


def collinear_phase(one_minus_mse: np.ndarray) -> int:
    """The collinear phase of a task whose order-0 signatures are all equal (``mod``; SPEC §3): the
    index of the snapshot where the order-0 1 − MSE (S,) peaks (1: the embeddings are collinear)."""
    return int(np.nanargmax(one_minus_mse))


def collinear_phase_probe(table: dict, member: int) -> dict:
    """The order-1 probe of one member at its collinear phase (:func:`collinear_phase`) and at the end
    (SPEC §3, §8 F5a/F8a). Returns ``collinear`` (that peak), ``collinear_epoch``,
    ``probe_collinear`` and ``probe_end`` (the held-out order-1 probe there and at the last snapshot),
    and ``last_epoch``; ``table`` is the run's :func:`ctxstair.rundir.read_alignment`."""
    epochs, one_minus_mse = rundir.alignment_series(table, "order0", member, "one_minus_mse")
    _, probe = rundir.alignment_series(table, "order1_probe", member)
    peak = collinear_phase(one_minus_mse)
    return dict(collinear=float(one_minus_mse[peak]), collinear_epoch=int(epochs[peak]),
                probe_collinear=float(probe[peak]), probe_end=float(probe[-1]), last_epoch=int(epochs[-1]))


def probe_rise(per_member: list[dict]) -> tuple[float, float, bool | None]:
    """(median rise, noise, met) of the order-1 probe from the collinear phase to the end over the
    members (dicts of :func:`collinear_phase_probe`). A model that does not learn leaves its plateau
    at a moment decided by rounding, so where its probe ends is chaotic, but that it rises is not:
    met when the median rise exceeds the noise, the seed-to-seed range of the probe in the collinear
    phase; None (not judged) with fewer than :data:`MIN_SEEDS` members."""
    rise = median([p["probe_end"] - p["probe_collinear"] for p in per_member])
    before = [p["probe_collinear"] for p in per_member]
    noise = max(before) - min(before)
    return rise, noise, bool(rise > noise) if len(per_member) >= MIN_SEEDS else None


#: The numbers of :func:`rho_next_course`, in ``sweep.csv`` order.
RHO_NEXT_NUMBERS = ("rho_init", "rho_peak", "rho_peak_step", "peak_fraction", "peak_rise", "rho_end",
                    "decay_fraction", "val_loss_at_peak", "val_loss_end")


def rho_next_course(run_dir: Path) -> dict:
    """The course of ρ_next (SPEC §7) in an analysed LM run directory: ``steps`` (S,) and ``rho``
    (S,) from ``lm_analysis.csv`` (measure ``rho_next``, Pearson), ``val_steps`` and ``val_loss``
    from ``metrics.jsonl``, and the numbers of :data:`RHO_NEXT_NUMBERS`:

    ``rho_init`` (step 0), ``rho_peak`` and ``rho_peak_step`` (the largest value and its step),
    ``peak_fraction`` (that step over the run's last step), ``peak_rise`` (peak − init), ``rho_end``,
    ``decay_fraction`` ((peak − end) / peak: how far ρ_next falls back, as a fraction of the peak),
    ``val_loss_at_peak`` and ``val_loss_end`` (held-out loss at the peak's snapshot and at the end).
    """
    steps, rho = measure_series(read_lm_analysis(run_dir), RHO_NEXT)
    rows = rundir.read_metric_rows(run_dir)
    val = dict(sorted((r["step"], r["val_loss"]) for r in rows if "val_loss" in r))
    peak = int(np.nanargmax(rho))
    course = {"steps": steps, "rho": rho, "val_steps": np.array(list(val)), "val_loss": np.array(list(val.values()))}
    course.update(rho_init=float(rho[0]), rho_peak=float(rho[peak]), rho_peak_step=int(steps[peak]),
                  peak_fraction=float(steps[peak] / steps[-1]) if steps[-1] > 0 else float("nan"),
                  peak_rise=float(rho[peak] - rho[0]), rho_end=float(rho[-1]),
                  decay_fraction=float((rho[peak] - rho[-1]) / rho[peak]) if rho[peak] > 0 else float("nan"),
                  val_loss_at_peak=float(val.get(int(steps[peak]), np.nan)),
                  val_loss_end=float(val.get(int(steps[-1]), np.nan)))
    return course

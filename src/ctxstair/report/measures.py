"""Numbers read off a run directory for recipe reports (SPEC §3, §8): series per member, peaks,
onsets. Every function reads files only, so reports can be rebuilt from the run directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.analysis.lm_staircase import measure_series, read_lm_analysis
from ctxstair.lm.schema import RHO_NEXT


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
    """Median over ensemble members (NaN-aware)."""
    return float(np.nanmedian(values)) if len(values) else float("nan")


def fmt(x: float | None, digits: int = 3) -> str:
    """A number for a report ('n/a' for None or NaN)."""
    return "n/a" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}f}"


#: Fewest seeds over which a number in a chaotic regime is judged (docs/reliability.md, "Audit").
MIN_SEEDS = 3


def collinear_phase_probe(table: dict, member: int) -> dict:
    """The order-1 probe of one member at its collinear phase and at the end (SPEC §3, §8 F5a/F8a).

    For a task whose order-0 signatures are all equal (``mod``) the collinear phase is the snapshot
    where order-0 1 − MSE peaks. Returns ``collinear`` (that peak), ``collinear_epoch``,
    ``probe_collinear`` and ``probe_end`` (the held-out order-1 probe there and at the last snapshot),
    and ``last_epoch``; ``table`` is the run's :func:`ctxstair.rundir.read_alignment`."""
    epochs, one_minus_mse = rundir.alignment_series(table, "order0", member, "one_minus_mse")
    _, probe = rundir.alignment_series(table, "order1_probe", member)
    peak = int(np.nanargmax(one_minus_mse))
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

"""Numbers read off a run directory for recipe reports (SPEC §3, §8): series per member, peaks,
onsets. Every function reads files only, so reports can be rebuilt from the run directory."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir


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

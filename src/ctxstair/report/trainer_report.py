"""The report of a Hugging Face ``Trainer`` output directory measured by
:class:`ctxstair.monitor.StaircaseCallback` (SPEC §6.4, §7), drawn from its files only.

``ctxstair report DIR`` takes this route when DIR is a Trainer output
(:func:`ctxstair.rundir.directory_kind`): the numbers are read by
:func:`ctxstair.report.lm_series.trainer_series`, drawn by :func:`ctxstair.report.lm_figures.staircase_figure`,
and ``staircase_monitor.json`` (the callback's settings) is shown with the report.

    ctxstair report runs/trainer-shakespeare     # figures/staircase.png and report.html in the directory
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair.measure.schema import ATTENTION_CORR, ATTENTION_NULL, PATH_SHARE, PROBE, RHO_NEXT, SHUFFLED
from ctxstair.monitor import SETTINGS_FILE
from ctxstair.report.figures import DEFAULT_FIGURE_FORMAT, save_figure
from ctxstair.report.html import write_report
from ctxstair.report.lm_figures import staircase_figure
from ctxstair.report.lm_series import StaircaseSeries, read_state_file, trainer_series

FIGURE = Path("figures") / "staircase.png"
#: What SPEC §7 expects of each curve (shown next to the measured numbers; a user's run is not judged).
_EXPECTED = {
    "rho_next": "rises fast from ≈ 0, peaks early, decays to a stable non-zero level (SPEC §7)",
    "probe": "held-out MSE drops fast and stays low, below the shuffled control (SPEC §7)",
    "attention": "clear early correlation, above the permutation null (SPEC §7)",
    "paths": "the direct path dominates early; attention and MLP paths take over (SPEC §6.4)",
}


def key_numbers(series: StaircaseSeries) -> tuple[str, list[dict]]:
    """The key numbers of a run in words (one paragraph) and as report rows (measured / expected by SPEC §7)."""
    steps = series.steps
    sentences, rows = [], []
    if series.has(RHO_NEXT):
        at, rho = series.measured(RHO_NEXT)
        peak = int(np.nanargmax(rho))
        sentences.append(f"ρ_next went from {rho[0]:+.3f} at step {at[0]} to a peak of {rho[peak]:+.3f} at step "
                         f"{at[peak]} and was {rho[-1]:+.3f} at step {at[-1]} ({at.size} measurements).")
        rows.append(_row("ρ_next: first → peak → last", f"{rho[0]:+.3f} (step {at[0]}) → {rho[peak]:+.3f} (step "
                         f"{at[peak]}) → {rho[-1]:+.3f} (step {at[-1]})", _EXPECTED["rho_next"]))
    if series.has(PROBE):
        at, mse = series.measured(PROBE)
        control = series.measured(SHUFFLED)[1]
        below = int(np.sum(mse < control))
        sentences.append(f"The prefix probe's held-out MSE was {mse[-1]:.4f} at step {at[-1]} against "
                         f"{control[-1]:.4f} for the shuffled control (below it at {below} of {at.size} measurements).")
        rows.append(_row("prefix probe held-out MSE vs shuffled control, last", f"{mse[-1]:.4f} vs {control[-1]:.4f} "
                         f"(below at {below} of {at.size})", _EXPECTED["probe"]))
    layers = series.layers()
    if layers:
        corr = np.stack([series.values[f"{ATTENTION_CORR}/{layer}"] for layer in layers])
        null = np.stack([series.values[f"{ATTENTION_NULL}/{layer}"] for layer in layers])
        layer, col = np.unravel_index(np.nanargmax(np.abs(corr)), corr.shape)
        above = int(np.sum(np.abs(corr) > null))
        pairs = int(np.sum(~np.isnan(corr)))
        sentences.append(f"The largest attention-path correlation was {corr[layer, col]:+.3f} in layer "
                         f"{layers[layer]} at step {steps[col]} (permutation null {null[layer, col]:.3f}); |r| was "
                         f"above the null at {above} of {pairs} (layer, step) pairs.")
        rows.append(_row("largest attention-path correlation (layer, step; null)", f"{corr[layer, col]:+.3f} (layer "
                         f"{layers[layer]}, step {steps[col]}; null {null[layer, col]:.3f})", _EXPECTED["attention"]))
    if series.has(PATH_SHARE, "embed"):
        at, direct = series.measured(PATH_SHARE, "embed")
        sentences.append(f"The direct path's share of the embedding update went from {direct[0]:.2f} (step {at[0]}) "
                         f"to {direct[-1]:.2f} (step {at[-1]}).")
        rows.append(_row("direct-path share: first → last", f"{direct[0]:.2f} → {direct[-1]:.2f}", _EXPECTED["paths"]))
    if series.seconds is not None:
        seconds = series.seconds[~np.isnan(series.seconds)]
        sentences.append(f"The monitor took {seconds.sum():.1f} s in all ({seconds.mean():.2f} s per measurement).")
    return " ".join(sentences), rows


def _row(name: str, measured: str, expected: str) -> dict:
    return {"name": name, "measured": measured, "expected": expected, "met": None}


def write_trainer_report(directory: str | Path, figure_format: str = DEFAULT_FIGURE_FORMAT) -> Path:
    """Draw ``figures/staircase.png`` (with its ``figure_format`` copy) and write ``report.html`` into a
    Trainer output directory (module docstring); returns the report's path. InputError without
    staircase measurements."""
    directory = Path(directory)
    series = trainer_series(directory)
    save_figure(staircase_figure(series, "The Context Staircase measured live in a Trainer run (SPEC §6.4, §7)"),
                directory / FIGURE, figure_format)
    paragraph, rows = key_numbers(series)
    settings = directory / SETTINGS_FILE
    tokens = ""
    if settings.is_file():
        setup = read_state_file(settings).get("monitor", {})
        windows = setup.get("corpus", {}).get("windows", "?")
        tokens = f" over {len(setup.get('tokens', []))} tokens and {windows} windows"
    caption = (f"Staircase measurements logged live by StaircaseCallback{tokens}, read from "
               f"{series.state.relative_to(directory)}: ρ_next, the prefix probe against its control, the "
               "attention-path correlation per layer with its null, the path shares, and the cost per measurement.")
    return write_report(directory, title="Context Staircase of a Trainer run", summary_paragraph=paragraph,
                        key_numbers=rows, figures=[(caption, FIGURE)])

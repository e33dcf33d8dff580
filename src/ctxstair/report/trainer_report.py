"""The report of a Hugging Face ``Trainer`` output directory measured by
:class:`ctxstair.monitor.StaircaseCallback` (SPEC §6.4, §7), drawn from its files only.

``ctxstair report DIR`` takes this route when DIR holds ``trainer_state.json`` (written by
``trainer.save_state()``) or ``checkpoint-<step>/trainer_state.json`` files. Of these the one with
the largest ``global_step`` is read (its ``log_history`` holds every earlier entry); the entries
with ``staircase/*`` keys make the curves, the ``loss`` entries the loss panel, and
``staircase_monitor.json`` (the callback's settings) is shown with the report.

    ctxstair report runs/trainer-shakespeare     # figures/staircase.png and report.html in the directory
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ctxstair.errors import InputError
from ctxstair.monitor import KEY_PREFIX, SETTINGS_FILE
from ctxstair.report.figures import plt, save_figure
from ctxstair.report.html import write_report
from ctxstair.report.lm_figures import step_axis
from ctxstair.report.run_figures import PALETTE

STATE_FILE = "trainer_state.json"
FIGURE = Path("figures") / "staircase.png"
_LAYER_KEY = re.compile(r"attention_path_(corr|null)/(\d+)$")
#: What SPEC §7 expects of each curve (shown next to the measured numbers; a user's run is not judged).
_EXPECTED = {
    "rho_next": "rises fast from ≈ 0, peaks early, decays to a stable non-zero level (SPEC §7)",
    "probe": "held-out MSE drops fast and stays low, below the shuffled control (SPEC §7)",
    "attention": "clear early correlation, above the permutation null (SPEC §7)",
    "paths": "the direct path dominates early; attention and MLP paths take over (SPEC §6.4)",
}


def is_trainer_output(directory: str | Path) -> bool:
    """Whether ``directory`` holds a Trainer state: ``trainer_state.json`` at its top or in a checkpoint."""
    directory = Path(directory)
    return (directory / STATE_FILE).is_file() or any(directory.glob(f"checkpoint-*/{STATE_FILE}"))


def read_staircase_history(directory: str | Path) -> dict:
    """The staircase curves (SPEC §6.4, §7) of a Trainer output directory.

    Returns:
        dict with ``state`` (the path read), ``steps`` (sorted int array of the measured steps),
        ``series`` (name without the ``staircase/`` prefix -> float array over ``steps``, NaN where
        a measure was not taken at a step) and ``loss`` ((steps, values) of the logged training loss).
        InputError when no state file or no ``staircase/*`` entry exists.
    """
    directory = Path(directory)
    candidates = [directory / STATE_FILE, *directory.glob(f"checkpoint-*/{STATE_FILE}")]
    states = [(_read_state(path), path) for path in candidates if path.is_file()]
    if not states:
        raise InputError(f"{directory} holds no {STATE_FILE} (nor checkpoint-*/{STATE_FILE}): not a Trainer output")
    state, path = max(states, key=lambda pair: (pair[0].get("global_step", 0), pair[1] == candidates[0]))
    history = [row for row in state.get("log_history", []) if isinstance(row, dict) and "step" in row]
    measured = [row for row in history if any(str(key).startswith(KEY_PREFIX) for key in row)]
    if not measured:
        raise InputError(f"{path} has no {KEY_PREFIX}* entries in its log_history: attach a StaircaseCallback "
                         "(ctxstair.monitor.attach), or measure the checkpoints with `ctxstair analyze-model DIR`")
    steps = np.array(sorted({int(row["step"]) for row in measured}))
    index = {step: i for i, step in enumerate(steps)}
    series: dict[str, np.ndarray] = {}
    for row in measured:
        for key, value in row.items():
            if str(key).startswith(KEY_PREFIX) and isinstance(value, (int, float)):
                name = key[len(KEY_PREFIX):]
                series.setdefault(name, np.full(steps.size, np.nan))[index[int(row["step"])]] = float(value)
    loss = [(int(row["step"]), float(row["loss"])) for row in history if isinstance(row.get("loss"), (int, float))]
    return {"state": path, "steps": steps, "series": series,
            "loss": tuple(np.array(column) for column in zip(*loss)) if loss else (np.zeros(0), np.zeros(0))}


def _read_state(path: Path) -> dict:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"cannot read {path}: {str(error).splitlines()[0]}") from None
    if not isinstance(state, dict):
        raise InputError(f"{path} is not a Trainer state (a JSON object with log_history)")
    return state


def _layers(series: dict) -> list[int]:
    return sorted({int(m.group(2)) for name in series if (m := _LAYER_KEY.fullmatch(name))})


def _path_names(series: dict) -> list[str]:
    """The ``path_share/*`` names in the residual stream's order: direct, then attn.ℓ, mlp.ℓ by layer
    (the Trainer writes its state with sorted keys)."""
    def position(name: str) -> tuple[int, int, int]:
        part = name.split("/", 1)[1]
        if part == "embed":
            return (0, 0, 0)
        kind, _, layer = part.partition(".")
        return (1, int(layer) if layer.isdigit() else 0, 0 if kind == "attn" else 1)

    return sorted((name for name in series if name.startswith("path_share/")), key=position)


def _measured(steps: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The steps where a measure was taken, and its values there (the sparser parts skip steps)."""
    keep = ~np.isnan(values)
    return steps[keep], values[keep]


def _not_measured(ax: plt.Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"{what}: not measured in this run", ha="center", va="center", transform=ax.transAxes,
            color="grey")


def staircase_figure(history: dict) -> plt.Figure:
    """Six panels over training steps (SPEC §6.4, §7): ρ_next (Pearson, Spearman); the training loss; the prefix probe's
    held-out MSE against its shuffled control; the attention-path correlation per layer (solid) with its
    permutation null (dashed); the path shares of the embedding update; the seconds each measurement took."""
    steps, series = history["steps"], history["series"]
    fig, axes = plt.subplots(3, 2, figsize=(12, 10.5), layout="constrained")
    (rho, loss), (probe, attention), (shares, cost) = axes
    for colour, (name, label) in zip(PALETTE, (("rho_next", "Pearson"), ("rho_next_spearman", "Spearman"))):
        if name in series:
            rho.plot(*_measured(steps, series[name]), color=colour, marker="o", markersize=3, label=f"ρ_next ({label})")
    rho.axhline(0, color="grey", linewidth=0.8)
    rho.set_ylabel("correlation of S^emb with S^next\n(upper triangle over the monitored tokens)")
    rho.set_title("(a) embeddings vs next-token signatures", fontsize=10)
    loss.plot(*history["loss"], color="black", linewidth=1.2, label="training loss (logged)")
    loss.set_ylabel("next-token loss (nats)")
    loss.set_title("(b) training loss", fontsize=10)
    for colour, (name, label) in zip(PALETTE, (("probe_heldout_mse", "prefix probe, held-out tokens"),
                                               ("probe_shuffled_mse", "control: signatures shuffled"))):
        if name in series:
            probe.plot(*_measured(steps, series[name]), color=colour, marker="o", markersize=3, label=label)
    if "probe_heldout_mse" not in series:
        _not_measured(probe, "the prefix probe")
    probe.set_ylabel("MSE of cosine similarities\n(pairs of held-out tokens)")
    probe.set_title("(c) first-order prefix probe vs its control", fontsize=10)
    for layer, colour in zip(_layers(series), plt.get_cmap("tab10").colors):
        attention.plot(*_measured(steps, series[f"attention_path_corr/{layer}"]), color=colour, marker="o",
                       markersize=3, label=f"layer {layer}")
        attention.plot(*_measured(steps, series[f"attention_path_null/{layer}"]), color=colour, linestyle="--",
                       linewidth=0.9, label=f"layer {layer} null (max |r|, 100 permutations)")
    if not _layers(series):
        _not_measured(attention, "attention paths")
    attention.set_ylabel("Pearson r: S(φ^attn,ℓ) vs S(W_O W_V w)")
    attention.set_title("(d) attention-path signature per layer", fontsize=10)
    for i, name in enumerate(_path_names(series)):
        part = name.split("/", 1)[1]
        shares.plot(*_measured(steps, series[name]), color=plt.get_cmap("tab10")(i), marker="o", markersize=3,
                    linestyle="-" if part == "embed" else ("--" if part.startswith("attn") else ":"),
                    label="direct (embedding)" if part == "embed" else part)
    if not _path_names(series):
        _not_measured(shares, "path shares")
    shares.set_ylabel("share of the summed path norms")
    shares.set_title("(e) paths of the embedding update", fontsize=10)
    if "seconds" in series:
        cost.plot(*_measured(steps, series["seconds"]), color=PALETTE[0], marker="o", markersize=3,
                  label="one measurement")
    cost.set_ylabel("wall time (s)")
    cost.set_title("(f) cost of each measurement", fontsize=10)
    for ax in axes.ravel():
        step_axis(ax)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, frameon=False)
    fig.suptitle("The Context Staircase measured live in a Trainer run (SPEC §6.4, §7)")
    return fig


def key_numbers(history: dict) -> tuple[str, list[dict]]:
    """The key numbers of a run in words (one paragraph) and as report rows (measured / expected by SPEC §7)."""
    steps, series = history["steps"], history["series"]
    sentences, rows = [], []
    if "rho_next" in series:
        at, rho = _measured(steps, series["rho_next"])
        peak = int(np.nanargmax(rho))
        sentences.append(f"ρ_next went from {rho[0]:+.3f} at step {at[0]} to a peak of {rho[peak]:+.3f} at step "
                         f"{at[peak]} and was {rho[-1]:+.3f} at step {at[-1]} ({at.size} measurements).")
        rows.append(_row("ρ_next: first → peak → last", f"{rho[0]:+.3f} (step {at[0]}) → {rho[peak]:+.3f} (step "
                         f"{at[peak]}) → {rho[-1]:+.3f} (step {at[-1]})", _EXPECTED["rho_next"]))
    if "probe_heldout_mse" in series:
        at, mse = _measured(steps, series["probe_heldout_mse"])
        control = _measured(steps, series["probe_shuffled_mse"])[1]
        below = int(np.sum(mse < control))
        sentences.append(f"The prefix probe's held-out MSE was {mse[-1]:.4f} at step {at[-1]} against "
                         f"{control[-1]:.4f} for the shuffled control (below it at {below} of {at.size} measurements).")
        rows.append(_row("prefix probe held-out MSE vs shuffled control, last", f"{mse[-1]:.4f} vs {control[-1]:.4f} "
                         f"(below at {below} of {at.size})", _EXPECTED["probe"]))
    layers = _layers(series)
    if layers:
        corr = np.stack([series[f"attention_path_corr/{layer}"] for layer in layers])
        null = np.stack([series[f"attention_path_null/{layer}"] for layer in layers])
        layer, col = np.unravel_index(np.nanargmax(np.abs(corr)), corr.shape)
        above = int(np.sum(np.abs(corr) > null))
        pairs = int(np.sum(~np.isnan(corr)))
        sentences.append(f"The largest attention-path correlation was {corr[layer, col]:+.3f} in layer "
                         f"{layers[layer]} at step {steps[col]} (permutation null {null[layer, col]:.3f}); |r| was "
                         f"above the null at {above} of {pairs} (layer, step) pairs.")
        rows.append(_row("largest attention-path correlation (layer, step; null)", f"{corr[layer, col]:+.3f} (layer "
                         f"{layers[layer]}, step {steps[col]}; null {null[layer, col]:.3f})", _EXPECTED["attention"]))
    if "path_share/embed" in series:
        at, direct = _measured(steps, series["path_share/embed"])
        sentences.append(f"The direct path's share of the embedding update went from {direct[0]:.2f} (step {at[0]}) "
                         f"to {direct[-1]:.2f} (step {at[-1]}).")
        rows.append(_row("direct-path share: first → last", f"{direct[0]:.2f} → {direct[-1]:.2f}", _EXPECTED["paths"]))
    if "seconds" in series:
        seconds = _measured(steps, series["seconds"])[1]
        sentences.append(f"The monitor took {seconds.sum():.1f} s in all ({seconds.mean():.2f} s per measurement).")
    return " ".join(sentences), rows


def _row(name: str, measured: str, expected: str) -> dict:
    return {"name": name, "measured": measured, "expected": expected, "met": None}


def write_trainer_report(directory: str | Path) -> Path:
    """Draw ``figures/staircase.png`` and write ``report.html`` into a Trainer output directory
    (module docstring); returns the report's path. InputError without staircase measurements."""
    directory = Path(directory)
    history = read_staircase_history(directory)
    save_figure(staircase_figure(history), directory / FIGURE)
    paragraph, rows = key_numbers(history)
    settings = directory / SETTINGS_FILE
    tokens = ""
    if settings.is_file():
        monitor = _read_state(settings).get("monitor", {})
        tokens = f" over {len(monitor.get('tokens', []))} tokens and {monitor.get('windows', ['?'])[0]} windows"
    caption = (f"Staircase measurements logged live by StaircaseCallback{tokens}, read from "
               f"{history['state'].relative_to(directory)}: ρ_next, the prefix probe against its control, the "
               "attention-path correlation per layer with its null, the path shares, and the cost per measurement.")
    return write_report(directory, title="Context Staircase of a Trainer run", summary_paragraph=paragraph,
                        key_numbers=rows, figures=[(caption, FIGURE)])

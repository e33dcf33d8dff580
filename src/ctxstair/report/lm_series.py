"""The LM staircase numbers of any output, read into one form for the figures and reports (SPEC §6.4, §7).

Three outputs hold the same measures under the same names (:mod:`ctxstair.measure.schema`):

* an LM run directory (``lm_analysis.csv``, and the losses of ``metrics.jsonl``): :func:`run_series`;
* an ``analyze-model`` folder (``analysis.json``): :func:`analysis_series`;
* a Hugging Face Trainer output measured live by the monitor (``trainer_state.json``'s
  ``log_history``, names prefixed ``staircase/``): :func:`trainer_series`.

Each gives a :class:`StaircaseSeries`; :func:`read_series` picks the reader from the directory's kind
(:func:`ctxstair.rundir.directory_kind`). Files only: nothing is recomputed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.analysis.lm_staircase import OUTPUT as LM_ANALYSIS
from ctxstair.analysis.lm_staircase import read_lm_analysis
from ctxstair.errors import InputError
from ctxstair.measure.schema import ATTENTION_CORR, LOG_PREFIX, PATH_SHARE, RHO_NEXT, key, parts

#: The file of an analyze-model folder that holds its rows.
ANALYSIS_FILE = "analysis.json"
#: The numbers of an analyze-model row that place its model state in training, not measures of it.
_POSITION = ("step", "tokens")


@dataclass
class StaircaseSeries:
    """The staircase measures of one output over its model states.

    Attributes:
        source: what was measured (a run directory, a model, a Trainer output), for titles.
        names: the model states' names (``step 50``, a checkpoint folder, a Hub revision).
        steps: (S,) their training steps, None when some state has none (a single model, ``main``).
        values: measure name (:mod:`ctxstair.measure.schema`) -> (S,) float, NaN where not measured.
        loss: (steps, values) of the training loss, when the output logged it.
        val_loss: (steps, values) of the held-out loss, when the output has it.
        seconds: (S,) the wall time of each live measurement (the monitor's), or None.
        state: the file the numbers were read from.
        extra: what else the output records (an analysis folder's setup, corpus and checks).
        flagged: state name -> why it is flagged (an ``analyze-model`` series check: its embedding
            equals another state's or ``main``'s); such states are left out of :meth:`measured`
            unless ``keep_flagged``, and drawn apart (:meth:`flagged_points`).
        keep_flagged: whether the flagged states stay in the curves.
        tokens: (S,) the tokens seen at each state, where every state's name says them (a Hub series of
            OLMo revisions, ``step1000-tokens4B``), else None.
    """

    source: str
    names: list[str]
    steps: np.ndarray | None
    values: dict[str, np.ndarray]
    loss: tuple[np.ndarray, np.ndarray] | None = None
    val_loss: tuple[np.ndarray, np.ndarray] | None = None
    seconds: np.ndarray | None = None
    state: Path | None = None
    extra: dict = field(default_factory=dict)
    flagged: dict[str, list[str]] = field(default_factory=dict)
    keep_flagged: bool = False
    tokens: np.ndarray | None = None

    def __repr__(self) -> str:
        """One line: the source, the states and ρ_next first → last where it was measured."""
        where = f" ({self.names[0]} … {self.names[-1]})" if len(self.names) > 1 else ""
        rho = self.values.get(RHO_NEXT)
        finite = np.array([]) if rho is None else rho[np.isfinite(rho)]
        headline = f"; ρ_next {finite[0]:.3f} → {finite[-1]:.3f}" if len(finite) else ""
        return (f"StaircaseSeries({self.source!r}: {len(self.names)} states{where}, {len(self.values)} measures"
                f"{headline})")

    def has(self, measure: str, part: str = "") -> bool:
        """Whether ``measure`` (with ``part``) was measured at some state."""
        name = key(measure, part)
        return name in self.values and bool(np.isfinite(self.values[name]).any())

    def measured(self, measure: str, part: str = "") -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) where ``measure`` was measured (the expensive parts skip states), flagged
        states left out unless ``keep_flagged``; positions 0..S-1 stand in for the steps when the
        states have none."""
        return self._points(measure, part, ~self._flags() if not self.keep_flagged else None)

    def flagged_points(self, measure: str, part: str = "") -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of the flagged states where ``measure`` was measured (:attr:`flagged`)."""
        return self._points(measure, part, self._flags())

    def _flags(self) -> np.ndarray:
        return np.array([name in self.flagged for name in self.names], dtype=bool)

    def _points(self, measure: str, part: str, among: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        values = self.values.get(key(measure, part), np.full(len(self.names), np.nan))
        at = self.steps if self.steps is not None else np.arange(len(self.names))
        keep = ~np.isnan(values) & (True if among is None else among)
        return at[keep], values[keep]

    def layers(self) -> list[str]:
        """The layers of the attention-path measures, by number."""
        return parts(self.values, ATTENTION_CORR)

    def paths(self) -> list[str]:
        """The paths of the path shares, in the residual stream's order (direct, then per layer)."""
        return parts(self.values, PATH_SHARE)


def run_series(run_dir: str | os.PathLike) -> StaircaseSeries:
    """The series of an analysed LM run directory: ``lm_analysis.csv`` by step, with the training loss
    per step and the held-out loss at the snapshots of ``metrics.jsonl``."""
    run_dir = Path(run_dir)
    table = read_lm_analysis(run_dir)
    steps = np.unique(table["step"])
    index = {int(step): i for i, step in enumerate(steps)}
    values: dict[str, np.ndarray] = {}
    for step, measure, part, value in zip(table["step"], table["measure"], table["part"], table["value"]):
        values.setdefault(key(measure, part), np.full(steps.size, np.nan))[index[int(step)]] = value
    loss, val_loss = run_losses(run_dir)
    return StaircaseSeries(str(run_dir), [f"step {s}" for s in steps], steps, values, loss, val_loss,
                           state=run_dir / LM_ANALYSIS)


def run_losses(run_dir: str | os.PathLike) -> tuple[tuple | None, tuple | None]:
    """(steps, values) of the training loss and of the held-out loss in an LM run's ``metrics.jsonl``
    (None for one it does not hold)."""
    rows = rundir.read_metric_rows(run_dir)
    columns = []
    for name in ("loss", "val_loss"):
        pairs = [(r["step"], r[name]) for r in rows if name in r]
        columns.append(tuple(np.array(c) for c in zip(*pairs)) if pairs else None)
    return columns[0], columns[1]


def analysis_series(folder: str | os.PathLike) -> StaircaseSeries:
    """The series of an ``analyze-model`` output folder (``analysis.json``), one state per checkpoint,
    with the flags of its series checks (``checks``; none in a folder written before them)."""
    folder = Path(folder)
    result = rundir.read_json(folder, ANALYSIS_FILE, keys=("checkpoints", "source", "setup"))
    rows = result["checkpoints"]
    names = [row["name"] for row in rows]
    # A position is known for the series only where every row has it (a Hub series may end with main).
    steps, tokens = (None if any(row.get(name) is None for row in rows) else np.array([row[name] for row in rows])
                     for name in _POSITION)
    # Only numbers are measures: the rows also say where the weights came from (commit, weights, hash).
    measures = [{name: value for name, value in row.items()
                 if name not in _POSITION and (value is None or isinstance(value, (int, float)))} for row in rows]
    values = {name: np.array([np.nan if m.get(name) is None else m[name] for m in measures], dtype=np.float64)
              for name in dict.fromkeys(name for m in measures for name in m)}
    checks = result.get("checks", {})
    return StaircaseSeries(str(result["source"]), names, steps, values, state=folder / ANALYSIS_FILE,
                           extra={"setup": result["setup"], "paths_skipped": result.get("paths_skipped"),
                                  "corpus": result.get("corpus", {}), "checks": checks},
                           flagged=dict(checks.get("flagged", {})), keep_flagged=bool(checks.get("keep_flagged")),
                           tokens=tokens)


def trainer_series(directory: str | os.PathLike) -> StaircaseSeries:
    """The series of a Hugging Face Trainer output measured by ``ctxstair.monitor``.

    Of ``trainer_state.json`` (written by ``trainer.save_state()``) and the
    ``checkpoint-<step>/trainer_state.json`` files, the one with the largest ``global_step`` is read
    (its ``log_history`` holds every earlier entry); the entries with ``staircase/*`` keys give the
    measures (and ``staircase/seconds`` each measurement's cost), the ``loss`` entries the training
    loss. InputError when no state file or no ``staircase/*`` entry exists."""
    directory = Path(directory)
    candidates = [directory / rundir.TRAINER_STATE, *directory.glob(f"checkpoint-*/{rundir.TRAINER_STATE}")]
    states = [(read_state_file(path), path) for path in candidates if path.is_file()]
    if not states:
        raise InputError(f"{directory} holds no {rundir.TRAINER_STATE} (nor checkpoint-*/{rundir.TRAINER_STATE}): "
                         "not a Trainer output")
    state, path = max(states, key=lambda pair: (pair[0].get("global_step", 0), pair[1] == candidates[0]))
    history = [row for row in state.get("log_history", []) if isinstance(row, dict) and "step" in row]
    measured = [row for row in history if any(str(name).startswith(LOG_PREFIX) for name in row)]
    if not measured:
        raise InputError(f"{path} has no {LOG_PREFIX}* entries in its log_history: attach a StaircaseCallback "
                         "(ctxstair.monitor.attach), or measure the checkpoints with `ctxstair analyze-model DIR`")
    steps = np.array(sorted({int(row["step"]) for row in measured}))
    index = {step: i for i, step in enumerate(steps)}
    values: dict[str, np.ndarray] = {}
    for row in measured:
        for name, value in row.items():
            if str(name).startswith(LOG_PREFIX) and isinstance(value, (int, float)):
                column = values.setdefault(name[len(LOG_PREFIX):], np.full(steps.size, np.nan))
                column[index[int(row["step"])]] = float(value)
    seconds = values.pop("seconds", None)
    loss = [(int(row["step"]), float(row["loss"])) for row in history if isinstance(row.get("loss"), (int, float))]
    return StaircaseSeries(str(directory), [f"step {s}" for s in steps], steps, values,
                           tuple(np.array(column) for column in zip(*loss)) if loss else None,
                           seconds=seconds, state=path)


def read_state_file(path: Path) -> dict:
    """A JSON object file (a Trainer state, the monitor's settings); InputError naming it otherwise."""
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"cannot read {path}: {str(error).splitlines()[0]}") from None
    if not isinstance(state, dict):
        raise InputError(f"{path} is not a Trainer state (a JSON object with log_history)")
    return state


def read_series(directory: str | os.PathLike) -> StaircaseSeries:
    """The series of any output that holds LM staircase numbers, by its kind: an LM run, an
    ``analyze-model`` folder or a Trainer output; InputError for any other directory."""
    kind = rundir.directory_kind(directory)
    readers = {rundir.LM_RUN: run_series, rundir.SERIES: analysis_series, rundir.TRAINER: trainer_series}
    if kind not in readers:
        raise InputError(f"{directory} holds no LM staircase numbers: not an LM run, an analyze-model output "
                         "or a Trainer output")
    return readers[kind](directory)

"""Recipes: named experiments of SPEC §8 with default configs, measured key numbers and a report.

A recipe has one or several runs. A single-run recipe writes its run directory at ``--out``; a
multi-run recipe writes one run directory per part under ``--out/<part>/`` plus ``recipe.json``.
A recipe that trains nothing (e.g. ``init-scaling``, a computation at initialization) has no runs:
its ``compute`` writes data files into ``--out`` next to ``recipe.json`` (with ``"parts": []`` and
its resolved ``params``). Either way ``--out`` ends up with ``summary.json``, ``figures/`` and
``report.html``, and ``ctxstair report DIR`` rebuilds them from the files alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import yaml

from ctxstair import rundir, tasks
from ctxstair.analysis import analyse
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.devices import resolve_device
from ctxstair.errors import InputError, TrainingDiverged
from ctxstair.io import fresh_output_dir
from ctxstair.report.figures import save_figure
from ctxstair.report.html import write_report
from ctxstair.train import train_run


@dataclass(frozen=True)
class KeyNumber:
    """One measured quantity next to its expectation; ``met`` is None where nothing is asserted."""

    name: str
    measured: str
    expected: str
    met: bool | None


@dataclass
class Outcome:
    """What a recipe concludes from its runs: key numbers, one paragraph, figures, raw summary."""

    key_numbers: list[KeyNumber]
    paragraph: str
    figures: dict[str, tuple[str, plt.Figure]] = field(default_factory=dict)  # file name -> (caption, figure)
    summary: dict[str, Any] = field(default_factory=dict)
    #: One row per member (seed, γ, modulus, model type, ...) with its parameters and headline
    #: numbers; written as ``summary.csv`` (columns in first-row order) when not empty.
    member_rows: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Recipe:
    """A named experiment: ``runs()`` gives part name -> default config ('' for a single run).

    A recipe without training has ``runs()`` return ``{}`` and sets ``params`` and ``compute``:
    ``params(overrides)`` turns the ``--set KEY=VALUE`` overrides (and ``--seeds`` as ``seeds``)
    into its resolved parameters, raising InputError on a bad one; ``compute(out, params)`` writes
    its data files into ``out``. ``conclude(out, {})`` then reads those files like any other recipe.
    """

    name: str
    figure: str
    expectation: str
    cpu_time: str
    runs: Callable[[], dict[str, RunConfig]]
    conclude: Callable[[Path, dict[str, Path]], Outcome]
    params: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    compute: Callable[[Path, dict[str, Any]], None] | None = None
    #: The per-run analyses (:mod:`ctxstair.analysis`) of every trained run, in order; they run when
    #: the run's ``analysis.enabled`` is true.
    analyses: tuple[str, ...] = ("alignment",)
    #: A recipe that trains outside the ensemble engine (a language model): ``trainer(out,
    #: overrides, resume, force)`` trains into ``out`` (a run directory with a ``config.yaml`` naming
    #: the recipe) and returns its config; ``runs()`` returns ``{}``.
    trainer: Callable[[Path, dict[str, Any], bool, bool], Any] | None = None
    #: A trainer recipe's checked config for a set of overrides (InputError on a bad one); a sweep
    #: checks every cell with it before anything is written, and only such recipes can be swept.
    configure: Callable[[dict[str, Any]], Any] | None = None


_RECIPES: dict[str, Recipe] = {}


def register(recipe: Recipe) -> Recipe:
    """Add ``recipe`` to the registry."""
    _RECIPES[recipe.name] = recipe
    return recipe


def get(name: str) -> Recipe:
    """The recipe called ``name``; InputError listing the recipes otherwise."""
    if name not in _RECIPES:
        raise InputError(f"unknown recipe {name!r}; available: {', '.join(sorted(_RECIPES))}")
    return _RECIPES[name]


def all_recipes() -> list[Recipe]:
    """Every recipe, by name."""
    return [_RECIPES[k] for k in sorted(_RECIPES)]


def resolve(recipe: Recipe, overrides: dict[str, Any], seeds: int | None = None) -> dict[str, RunConfig]:
    """The recipe's configs with ``overrides`` (and ``train.members = seeds``) applied and checked.

    Every task is built once here so that a bad parameter fails before anything is written."""
    if seeds is not None:
        if seeds < 1:
            raise InputError(f"--seeds must be >= 1, got {seeds}")
        overrides = {**overrides, "train.members": seeds}
    configs = {part: apply_overrides(cfg, overrides) for part, cfg in recipe.runs().items()}
    for cfg in configs.values():
        tasks.make(cfg.task.name, **cfg.task.params)
    return configs


#: What ``analysis=False`` sets: no alignment analysis and no snapshot files.
NO_ANALYSIS = {"analysis.enabled": False, "snapshots.save": False}


def run_recipe(name: str, out: str | Path, overrides: dict[str, Any] | None = None, *, seeds: int | None = None,
               resume: bool = False, force: bool = False, progress: bool | None = None,
               analysis: bool = True) -> Path:
    """Train, analyse and report recipe ``name`` into ``out``; return ``out``.

    ``analysis=False`` (``ctxstair run --no-analysis``) only trains: it applies
    :data:`NO_ANALYSIS` over ``overrides`` and writes no summary, figures or report, so each run
    directory holds config.yaml, members.csv, metrics.jsonl and signatures.npz. InputError for a
    recipe that trains no engine run (a computation, or a language model with its own trainer)."""
    recipe, out = get(name), Path(out)
    if not analysis:
        if recipe.trainer is not None or recipe.compute is not None:
            raise InputError(f"recipe {name!r} trains no ensemble runs: --no-analysis is not available"
                             + (" (use `ctxstair lm train --no-analysis`)" if recipe.trainer is not None else ""))
        both = sorted(set(NO_ANALYSIS) & set(overrides or {}))
        if both:
            raise InputError(f"--no-analysis sets {', '.join(NO_ANALYSIS)}; do not also --set {', '.join(both)}")
        overrides = {**(overrides or {}), **NO_ANALYSIS}
    if recipe.trainer is not None:
        if seeds is not None:
            raise InputError(f"recipe {name!r} trains one model: --seeds is not available")
        with _failure_reported(out, name):
            cfg = recipe.trainer(out, overrides or {}, resume, force)
        if cfg.analysis.enabled:
            analyse(out, recipe.analyses, resume)
        return write_recipe_report(out)
    if recipe.compute is not None:
        return _run_computation(recipe, out, overrides or {}, seeds, resume, force)
    configs = resolve(recipe, overrides or {}, seeds)
    for cfg in configs.values():  # every part is checked before the first one writes anything
        cfg.validate()
        resolve_device(cfg.train.device)
    single = list(configs) == [""]
    if not single:
        if out.exists() and not (resume or force):
            raise InputError(f"output directory {out} already exists; "
                             "use --resume to continue it or --force to replace it")
        if resume and out.exists() and not (out / "recipe.json").is_file():
            raise InputError(f"cannot resume {out}: no recipe.json there")
        if not (resume and out.exists()):  # a new recipe directory appears with its recipe.json
            with fresh_output_dir(out, force=force) as staging:
                rundir.write_json(staging, "recipe.json", {"recipe": name, "parts": list(configs)})
    paths = {part: out / part if part else out for part in configs}
    for part, cfg in configs.items():
        path = paths[part]
        with _failure_reported(path, name):
            train_run(cfg, path, resume=resume, force=force and single, progress=progress)
        if cfg.analysis.enabled:
            analyse(path, recipe.analyses, resume)
    return write_recipe_report(out) if analysis else out


@contextlib.contextmanager
def _failure_reported(run_dir: Path, name: str):
    """Let a TrainingDiverged through after writing the failed run's report."""
    try:
        yield
    except TrainingDiverged:
        from ctxstair.report.failure import write_failure_report

        write_failure_report(run_dir, name)
        raise


def _run_computation(recipe: Recipe, out: Path, overrides: dict[str, Any], seeds: int | None, resume: bool,
                     force: bool) -> Path:
    """Run a recipe without training: compute, write ``recipe.json`` and the report in a staging
    directory that becomes ``out`` only when complete."""
    if resume:
        raise InputError(f"recipe {recipe.name!r} trains nothing, so there is nothing to resume; "
                         "use --force to recompute")
    params = recipe.params({**overrides, **({} if seeds is None else {"seeds": seeds})})
    with fresh_output_dir(out, force=force) as staging:
        recipe.compute(staging, params)
        rundir.write_json(staging, "recipe.json", {"recipe": recipe.name, "parts": [], "params": params})
        write_recipe_report(staging)
    return out


def write_recipe_report(out: str | Path) -> Path:
    """(Re)build ``summary.json``, ``figures/`` and ``report.html`` of a recipe output directory."""
    out = Path(out)
    name, parts = _identify(out)
    recipe = get(name)
    paths = {part: out / part if part else out for part in parts}
    outcome = recipe.conclude(out, paths)
    captions = []
    for file_name, (caption, fig) in outcome.figures.items():
        save_figure(fig, out / "figures" / file_name)
        captions.append((caption, Path("figures") / file_name))  # relative to ``out``
    rundir.write_json(out, "summary.json", {"recipe": name, "key_numbers": [asdict(k) for k in outcome.key_numbers],
                                            **outcome.summary})
    if outcome.member_rows:
        rundir.write_table(out, "summary.csv", list(outcome.member_rows[0]), outcome.member_rows)
    # The verdict is the key numbers', so it is said here once rather than in every recipe's prose.
    verdict = ("" if all(k.met is not False for k in outcome.key_numbers)
               else " Not every expectation is met: see the ✗ rows.")
    write_report(out, title=f"{name} — {recipe.figure}", summary_paragraph=outcome.paragraph + verdict,
                 key_numbers=[asdict(k) for k in outcome.key_numbers], figures=captions)
    return out


def _identify(out: Path) -> tuple[str, list[str]]:
    """(recipe name, parts) of a recipe output directory."""
    if (out / "recipe.json").is_file():
        info = rundir.read_json(out, "recipe.json")
        return info["recipe"], info["parts"]
    if (out / "config.yaml").is_file():
        data = yaml.safe_load((out / "config.yaml").read_text())
        if not isinstance(data, dict) or "recipe" not in data:
            raise InputError(f"{out / 'config.yaml'} does not name a recipe")
        return str(data["recipe"]), [""]
    raise InputError(f"{out} is not a ctxstair run directory (no config.yaml or recipe.json)")

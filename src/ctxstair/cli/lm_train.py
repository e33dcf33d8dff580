"""``ctxstair lm train``: train, analyse and report a decoder language model (the ``lm-staircase``
recipe, SPEC §7).

    ctxstair lm train --out runs/lm --set corpus.source=shakespeare --set train.steps=4000
    torchrun --nproc_per_node=2 -m ctxstair lm train --out runs/lm     # data-parallel

Under torchrun rank 0 trains, analyses and reports; the other ranks only train (they write nothing).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ctxstair.cli.options import add_figure_format_option, add_training_options
from ctxstair.config import apply_overrides, parse_overrides
from ctxstair.devices import with_device


def register(commands) -> None:
    """Add ``lm train`` to the ``ctxstair`` sub-commands."""
    lm = commands.add_parser("lm", help="language models on text (SPEC §7)")
    actions = lm.add_subparsers(dest="lm_command", required=True, parser_class=type(lm))
    train = actions.add_parser("train", help="train a decoder LM from γ-init, analyse every snapshot, write the report")
    train.add_argument("--out", type=Path, default=Path("runs") / "lm", help="run directory (default runs/lm)")
    train.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="dotted LMConfig override, repeatable (e.g. --set corpus.source=shakespeare)")
    train.add_argument("--no-analysis", action="store_true", help="train only (analysis.enabled=false)")
    add_figure_format_option(train)
    add_training_options(train)
    train.set_defaults(handler=train_command)


def train_command(args: argparse.Namespace) -> None:
    """Run ``lm-staircase`` with the command's overrides and print where the report and the explorer are."""
    from ctxstair.cli.explore import explore_run
    from ctxstair.config.lm import LMConfig
    from ctxstair.lm.train import torchrun_world, train_lm
    from ctxstair.recipes import run_recipe

    overrides = with_device(parse_overrides(args.overrides), args.device)
    if args.no_analysis:
        overrides["analysis.enabled"] = False
    if torchrun_world() > 1 and int(os.environ["RANK"]) > 0:
        # A data-parallel helper: it trains alongside rank 0; analysis and report are rank 0's alone.
        train_lm(apply_overrides(LMConfig(), overrides), args.out, resume=args.resume, force=args.force)
        return
    run_recipe("lm-staircase", args.out, overrides, resume=args.resume, force=args.force,
               figure_format=args.figure_format)
    print(f"report: {args.out / 'report.html'}")
    explore_run(args.out)

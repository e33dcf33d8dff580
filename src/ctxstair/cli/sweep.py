"""``ctxstair sweep``: a recipe over a grid of overrides, merged into one table.

    ctxstair sweep staircase-add --grid model.init.gamma=0.5,1,1.5 --grid model.d=64,128 --seeds 4 --out runs/sweep
    ctxstair sweep staircase-add --grid model.init.gamma=0.5,1 --backend ray        # Ray (pip install 'ctxstair[ray]')
    RAY_ADDRESS=ray://head:10001 ctxstair sweep ... --backend ray                  # the same on a Ray cluster
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ctxstair.cli.options import add_figure_format_option, add_training_options
from ctxstair.config import parse_overrides
from ctxstair.devices import with_device


def register(commands) -> None:
    """Add ``ctxstair sweep``."""
    sweep = commands.add_parser("sweep",
                                help="run a recipe over a grid of overrides; merge into sweep.csv and phase diagrams")
    sweep.add_argument("recipe", help="recipe name (see `ctxstair recipes`)")
    sweep.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                       help="dotted config key and its values, repeatable; the sweep runs every combination")
    sweep.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override shared by every cell, repeatable")
    sweep.add_argument("--seeds", type=int, default=None,
                       help="members per cell (one batched ensemble), seeds seed..seed+K-1")
    sweep.add_argument("--backend", choices=["local", "ray"], default="local",
                       help="local: a process pool on this machine; ray: one Ray task per cell")
    sweep.add_argument("--workers", type=int, default=None,
                       help="cells trained at once (default: one per CPU core); "
                            "for ray, the CPUs of a local Ray instance")
    sweep.add_argument("--ray-address", default=None,
                       help="address of a running Ray cluster (default: RAY_ADDRESS, else a local instance)")
    sweep.add_argument("--no-analysis", action="store_true",
                       help="train only: the table gets loss and accuracy, no alignment")
    sweep.add_argument("--out", type=Path, default=None, help="sweep directory (default runs/<recipe>-sweep)")
    add_figure_format_option(sweep)
    add_training_options(sweep, "run the cells that are missing (same sweep); start the sweep if it does not exist yet",
                         "sweep")
    sweep.set_defaults(handler=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> None:
    """Run the sweep and print where its table and report are."""
    from ctxstair.sweep import parse_grid, run_sweep

    out = args.out or Path("runs") / f"{args.recipe}-sweep"
    run_sweep(args.recipe, out, parse_grid(args.grid), with_device(parse_overrides(args.overrides), args.device),
              seeds=args.seeds, backend=args.backend, workers=args.workers, ray_address=args.ray_address,
              analysis=not args.no_analysis, resume=args.resume, force=args.force, figure_format=args.figure_format)
    print(f"table: {out / 'sweep.csv'}\nreport: {out / 'report.html'}")

"""Sweeps over grids of overrides: ``ctxstair sweep`` and its Python API.

    from ctxstair.sweep import parse_grid, run_sweep
    run_sweep("staircase-add", "runs/sweep", parse_grid(["model.init.gamma=0.5,1,1.5"]), seeds=4)
"""

from ctxstair.sweep.grid import Cell, grid_cells, parse_grid
from ctxstair.sweep.run import run_sweep, sweep_rows, write_sweep_report

__all__ = ["Cell", "grid_cells", "parse_grid", "run_sweep", "sweep_rows", "write_sweep_report"]

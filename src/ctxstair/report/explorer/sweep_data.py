"""What the explorer of a sweep shows (``docs/sweeps.md``), computed from ``sweep.json`` and ``sweep.csv``.

The phase diagrams of the static report (:func:`ctxstair.report.sweep_figures.phase_specs`), as
interactive heatmaps over the first two grid keys (a line over the only key of a one-key grid):
each cell's colour and text are the median of the number over the cell's members and parts, and
over the values of any further grid keys, as in the report. Clicking a cell opens its run's
explorer (``cells/<name>/explorer.html``, or its first part's), which ``ctxstair explore`` writes
with the sweep's page; a table lists every cell with links to each of its runs' explorers.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.report.sweep_figures import phase_specs
from ctxstair.report.typeset import typeset

#: Columns of a language-model sweep's rows (they decide which phase diagrams apply).
LM_MARK = "peak_rise"


def cell_dirs(sweep_dir: str | Path) -> list[Path]:
    """The directories of the sweep's cells that exist, in ``sweep.json`` order."""
    sweep_dir = Path(sweep_dir)
    spec = rundir.read_json(sweep_dir, "sweep.json", keys=("cells",))
    cells = [sweep_dir / "cells" / cell["name"] for cell in spec["cells"]]
    return [cell for cell in cells if cell.is_dir()]


def sweep_payload(sweep_dir: str | Path, page_dir: str | Path | None = None) -> dict:
    """The data of a sweep's explorer page (module docstring); ``page_dir``: the directory the page
    goes to (default ``sweep_dir``), which its links are relative to.

    Returns:
        JSON-ready dict: ``kind`` "sweep", ``title``, ``lead``, ``keys`` (the grid keys),
        ``values`` {key: its values}, ``panels`` (``title``, ``label``, ``log``, ``z`` (ny, nx)
        medians or None, ``text``, ``cells`` (ny, nx) cell names), ``links`` {cell: its first
        run's explorer}, ``cells`` (``name``, ``explorers`` [(label, href)], ``report``), ``note``.
    """
    from ctxstair.report.explorer import EXPLORER, explorer_targets

    sweep_dir = Path(sweep_dir)
    page_dir = Path(page_dir or sweep_dir)

    def link(path: Path) -> str:
        return Path(os.path.relpath(path, page_dir)).as_posix()

    spec = rundir.read_json(sweep_dir, "sweep.json", keys=("cells",))
    rows = list(csv.DictReader(io.StringIO((sweep_dir / "sweep.csv").read_text()))) \
        if (sweep_dir / "sweep.csv").is_file() else []
    grid, keys = spec["grid"], list(spec["grid"])
    lm = bool(rows) and LM_MARK in rows[0]
    panels = [_panel(rows, spec, keys, title, column, label, log)
              for _, title, specs in phase_specs(spec["analysis"], lm) for column, label, log in specs]
    cells, links = [], {}
    for cell in spec["cells"]:
        path = sweep_dir / "cells" / cell["name"]
        runs = explorer_targets(path) if path.is_dir() else []
        explorers = [(run.name if run != path else "explorer", link(run / EXPLORER)) for run in runs]
        if explorers:
            links[cell["name"]] = explorers[0][1]
        cells.append({"name": cell["name"], "explorers": explorers,
                      "report": link(path / "report.html") if (path / "report.html").is_file() else None})
    pooled = f" Medians also pool the values of {', '.join(keys[2:])}." if len(keys) > 2 else ""
    return {
        "kind": "sweep", "title": f"sweep of {spec['recipe']} over {' × '.join(keys)}",
        "lead": ("Each panel is a phase diagram: the median of a number over a cell's members. Click a cell to open "
                 "its run's explorer." + pooled),
        "keys": keys, "values": {key: list(grid[key]) for key in keys}, "panels": panels, "links": links,
        "cells": cells, "report": link(sweep_dir / "report.html") if (sweep_dir / "report.html").is_file() else None,
        "note": None if rows else "sweep.csv is missing or empty: run `ctxstair report` on the sweep first.",
    }


def _panel(rows: list[dict], spec: dict, keys: list[str], title: str, column: str, label: str, log: bool) -> dict:
    """One phase diagram: the medians over the first two grid keys (rows y, columns x)."""
    values_x = spec["grid"][keys[0]]
    values_y = spec["grid"][keys[1]] if len(keys) > 1 else [None]
    z = [[None] * len(values_x) for _ in values_y]
    text = [[""] * len(values_x) for _ in values_y]
    names = [[None] * len(values_x) for _ in values_y]
    for i, y_value in enumerate(values_y):
        for j, x_value in enumerate(values_x):
            chosen = [cell["name"] for cell in spec["cells"] if cell["overrides"][keys[0]] == x_value
                      and (len(keys) < 2 or cell["overrides"][keys[1]] == y_value)]
            found = [float(r[column]) for r in rows if r["cell"] in chosen and r.get(column, "") != ""]
            total = sum(r["cell"] in chosen for r in rows)
            names[i][j] = chosen[0] if chosen else None
            if found:
                median = float(np.median(found))
                z[i][j] = median
                text[i][j] = f"{median:.0f}" if abs(median) >= 10 else f"{median:.3g}"
                text[i][j] += f" ({len(found)}/{total})" if len(found) < total else ""
            else:
                text[i][j] = "none"
    # The colour is log10 of the median where asked and every median is positive, as in the report.
    log = log and any(v is not None for row in z for v in row) and all(v is None or v > 0 for row in z for v in row)
    if log:
        z = [[None if v is None else float(np.log10(v)) for v in row] for row in z]
    return {"title": typeset(title), "label": typeset(label), "log": bool(log), "z": z, "text": text, "cells": names}

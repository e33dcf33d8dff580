"""Draw every configuration of the real-text search on one figure (docs/language-models.md).

    python docs/examples/lm-search/draw_all.py OUT.png RUN_OR_SWEEP_DIR...

A sweep directory contributes each of its complete cells (labelled by its grid values), a run
directory itself (labelled by its folder name); each must have been analysed (``lm_analysis.csv``).
"""

import sys
from pathlib import Path

from ctxstair import rundir
from ctxstair.analysis.measures import rho_next_course
from ctxstair.report.figures import save_figure
from ctxstair.report.sweep_figures import rho_next_curves_figure


def courses(paths: list[Path]) -> dict[str, dict]:
    """Label -> ρ_next course of every run below ``paths``."""
    found = {}
    for path in paths:
        if (path / "sweep.json").is_file():
            for cell in rundir.read_json(path, "sweep.json")["cells"]:
                if (path / "cells" / cell["name"]).is_dir():
                    values = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in cell["overrides"].items())
                    label = f"{path.name}: {values}"
                    found[label] = rho_next_course(path / "cells" / cell["name"])
        else:
            found[path.name] = rho_next_course(path)
    return found


if __name__ == "__main__":
    out, *dirs = sys.argv[1:]
    save_figure(rho_next_curves_figure(courses([Path(d) for d in dirs])), Path(out))

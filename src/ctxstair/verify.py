"""``ctxstair verify DIR``: check every stored artefact of a run, recipe or sweep
directory against its SHA-256 without loading anything into a model.

    ctxstair verify runs/staircase-add        # "ok: 1 run, 46 snapshots, 0 checkpoints verified"

For each run directory found (the directory itself, the parts of ``recipe.json``, the cells of
``sweep.json``): every file of ``snapshots/manifest.json`` is hashed and compared, a stuck writer
(neighbouring snapshots byte-identical although training moved) is looked for, and a resumable
checkpoint's tensor file is checked against the hash in its ``state.json``. The first problem is an
InputError naming the file (exit code 2); a run that stopped on a numerical fault is listed.
"""

from __future__ import annotations

import json
from pathlib import Path

from ctxstair import integrity, rundir
from ctxstair.errors import InputError


def run_directories(path: Path) -> list[Path]:
    """The run directories under a run, recipe or sweep directory."""
    kind = rundir.directory_kind(path)
    if kind in (rundir.RUN, rundir.LM_RUN):
        return [path]
    if kind == rundir.RECIPE:
        children = [path / part for part in rundir.read_json(path, "recipe.json", keys=("parts",))["parts"]]
        return [run for child in children for run in run_directories(child)]
    if kind == rundir.SWEEP:
        cells = rundir.read_json(path, "sweep.json", keys=("cells",))["cells"]
        children = [path / "cells" / cell["name"] for cell in cells if (path / "cells" / cell["name"]).is_dir()]
        return [run for child in children for run in run_directories(child)]
    raise InputError(f"{path} is not a ctxstair run, recipe or sweep directory "
                     "(no config.yaml, recipe.json or sweep.json)")


def verify_run(run: Path) -> tuple[int, int]:
    """Check one run directory; return (snapshots verified, checkpoints verified)."""
    snapshots = integrity.verify_folder(run / "snapshots") if (run / "snapshots").is_dir() else 0
    rundir.check_snapshot_progress(run)
    state = run / "checkpoint" / "state.json"
    if not state.is_file():
        return snapshots, 0
    try:
        info = json.loads(state.read_text())
        path = run / "checkpoint" / info["tensors"]
    except (json.JSONDecodeError, KeyError, TypeError):
        raise InputError(f"{state} is not a checkpoint record (JSON naming its safetensors file in \"tensors\"); "
                         "an interrupted language-model run of an earlier ctxstair cannot be resumed: "
                         "restart it") from None
    if not path.is_file():
        raise InputError(f"{path} is missing although {state} names it")
    if "sha256" in info:
        integrity.check_digest(path, path.read_bytes(), info["sha256"])
    return snapshots, 1

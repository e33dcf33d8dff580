"""``ctxstair verify DIR``: check every file of a run, recipe, sweep, ``analyze-model`` series or
statistics directory against its SHA-256 without loading anything into a model.

    ctxstair verify runs/staircase-add   # "ok: 1 run(s), 15 snapshots, …, 31 files in 1 record(s) verified"

For each run directory found (the directory itself, the parts of ``recipe.json``, the cells of
``sweep.json``): every file of ``snapshots/manifest.json`` is hashed and compared, a stuck writer
(neighbouring snapshots byte-identical although training moved) is looked for, and a resumable
checkpoint's tensor file is checked against the hash in its ``state.json``. Then every record of a
finished output below DIR (``ctxstair.sha256``, :func:`ctxstair.io.record_output`) is checked: each
file it lists is there with its SHA-256, and no file was added beside them. The first problem is an
InputError naming the file (exit code 2); a run that stopped on a numerical fault is listed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ctxstair import integrity, rundir
from ctxstair.errors import InputError
from ctxstair.io import RECORD, read_record, recorded_files


def run_directories(path: Path) -> list[Path]:
    """The run directories under a run, recipe or sweep directory (none under a series or a
    statistics directory, whose files only their record covers)."""
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
    if kind == rundir.SERIES or (path / RECORD).is_file():
        return []
    raise InputError(f"{path} is not a ctxstair run, recipe, sweep, series or statistics directory "
                     f"(no config.yaml, recipe.json, sweep.json, series.json or {RECORD})")


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
        integrity.check_digest(path, path.read_bytes(), info["sha256"], state)
    return snapshots, 1


def verify_records(path: Path) -> tuple[int, int]:
    """Check the record of ``path`` and of every recorded output below it; return (records, files)
    checked. InputError naming the first file that is missing, differs from its recorded SHA-256,
    or is not in its folder's record."""
    records = files = 0
    for folder in _recorded_folders(path):
        listed, present = read_record(folder), recorded_files(folder)
        record = folder / RECORD
        for name, expected in listed.items():
            if name not in present:
                raise InputError(f"{folder / name} is missing although {record} lists it; restore it, or run the "
                                 "command that wrote the folder again")
            integrity.check_digest(folder / name, present[name].read_bytes(), expected, record)
        added = sorted(set(present) - set(listed))
        if added:
            raise InputError(f"{folder / added[0]} is not in {record}: it was added or renamed after ctxstair "
                             "finished the folder; remove it, or run the command that wrote the folder again")
        records, files = records + 1, files + len(listed)
    return records, files


def _recorded_folders(path: Path) -> list[Path]:
    """``path`` and every folder below it that holds a record, outside temporaries."""
    found = []
    for parent, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if RECORD in names:
            found.append(Path(parent))
    return found

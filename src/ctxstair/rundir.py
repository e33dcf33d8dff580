"""Read and write the run directory, the file contract of ``docs/run-directory.md``.

Writers are atomic (temporary file, then rename); readers return plain numpy arrays and dicts so
that notebooks and other tools need nothing but this module.

    from ctxstair import rundir
    metrics = rundir.read_metrics("runs/staircase-add")       # {'member', 'epoch', 'loss', 'acc'}
    W = rundir.load_snapshot("runs/staircase-add", 100)        # {'W_E': (K, V, d), 'W_U': (K, V, d)}

This module is the file formats only (numpy, no torch), so that reports and notebooks need
nothing else; :class:`ctxstair.run.Run` is the run directory as one object for trainers and
analyses.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from safetensors.numpy import load as load_safetensors
from safetensors.numpy import save as save_safetensors

from ctxstair import numerics
from ctxstair.errors import InputError
from ctxstair.integrity import check_progress, read_verified, write_verified
from ctxstair.io import atomic_write_text
from ctxstair.signatures.hierarchy import SignatureHierarchy

ALIGNMENT_COLUMNS = ("member", "epoch", "signature", "pearson", "spearman", "one_minus_mse", "defined")
SNAPSHOT_DIR = "snapshots"

#: The kinds of directory the commands read (:func:`directory_kind`).
RUN, LM_RUN, RECIPE, SWEEP, TRAINER, SERIES = "run", "lm-run", "recipe", "sweep", "trainer", "series"
#: A Hugging Face Trainer's state, at the top of its output or in each ``checkpoint-<step>``.
TRAINER_STATE = "trainer_state.json"


def directory_kind(path: str | os.PathLike) -> str | None:
    """What kind of directory ``path`` is, decided once for every command, from the file that marks it:

    * ``sweep`` — ``sweep.json`` (``ctxstair sweep``);
    * ``series`` — ``series.json`` (``ctxstair analyze-model --out``: checkpoints or Hub revisions);
    * ``recipe`` — ``recipe.json``: a recipe with several runs, or one that only computes;
    * ``lm-run`` / ``run`` — ``config.yaml`` with or without a ``corpus`` section: a language-model
      run (``ctxstair lm train``, ``lm-staircase``) or an ensemble run (``ctxstair run``);
    * ``trainer`` — ``trainer_state.json`` at the top or in a ``checkpoint-<step>`` folder: a Hugging
      Face Trainer output (measured by ``ctxstair.monitor``, or a folder of checkpoints);
    * None — none of these (a model folder, or no ctxstair output at all).
    """
    path = Path(path)
    if not path.is_dir():
        return None
    for marker, kind in (("sweep.json", SWEEP), ("series.json", SERIES), ("recipe.json", RECIPE)):
        if (path / marker).is_file():
            return kind
    if (path / "config.yaml").is_file():
        return LM_RUN if _has_corpus(path / "config.yaml") else RUN
    if (path / TRAINER_STATE).is_file() or any(path.glob(f"checkpoint-*/{TRAINER_STATE}")):
        return TRAINER
    return None


def _has_corpus(config: Path) -> bool:
    """Whether a ``config.yaml`` has a ``corpus`` section (a language-model run's config); InputError
    naming it when it is damaged (:func:`read_yaml`)."""
    return "corpus" in read_yaml(config.parent, config.name)


def read_yaml(run_dir: str | os.PathLike, name: str) -> dict:
    """A YAML mapping of the run directory (``config.yaml``); InputError naming the file and line
    (:func:`damaged`) when it is not valid YAML, not a mapping, or was cut short."""
    import yaml

    path = Path(run_dir) / name
    try:
        data = yaml.safe_load(_read_whole(run_dir, name))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise damaged(path, f"not valid YAML ({getattr(error, 'problem', None) or 'unreadable'})",
                      None if mark is None else mark.line + 1) from None
    if not isinstance(data, dict):
        raise damaged(path, f"a YAML {type(data).__name__}, not a mapping of sections")
    return data


def snapshot_path(run_dir: str | os.PathLike, t: int, unit: str = "epoch") -> Path:
    """Path of the snapshot at time ``t``: ``snapshots/<unit>_<t:08d>.safetensors``, where ``unit``
    is what the trainer counts (``epoch`` for the ensemble engine, ``step`` for language models)."""
    return Path(run_dir) / SNAPSHOT_DIR / f"{unit}_{t:08d}.safetensors"


def save_snapshot(run_dir: str | os.PathLike, t: int, tensors: dict[str, np.ndarray], unit: str = "epoch") -> None:
    """Write named arrays (for an ensemble: member axis first) for time ``t`` as safetensors,
    atomically, and record its SHA-256 in ``snapshots/manifest.json`` (:mod:`ctxstair.integrity`)."""
    data = save_safetensors({k: np.ascontiguousarray(v) for k, v in tensors.items()}, metadata={unit: str(t)})
    write_verified(snapshot_path(run_dir, t, unit), data)


def snapshot_times(run_dir: str | os.PathLike) -> list[int]:
    """Sorted times (epochs or steps) that have a snapshot."""
    return sorted(_snapshot_files(run_dir))


def _snapshot_files(run_dir: str | os.PathLike) -> dict[int, Path]:
    folder = Path(run_dir) / SNAPSHOT_DIR
    files = folder.glob("*_*.safetensors") if folder.is_dir() else []
    return {int(p.stem.rsplit("_", 1)[1]): p for p in files if p.stem.rsplit("_", 1)[1].isdigit()}


def load_snapshot(run_dir: str | os.PathLike, t: int) -> dict[str, np.ndarray]:
    """Arrays of the snapshot at time ``t`` (e.g. ``W_E`` (K, V, d)) after checking its SHA-256;
    InputError naming the file if it is missing, corrupted, truncated or unreadable."""
    path = _snapshot_files(run_dir).get(t)
    if path is None:
        raise InputError(f"no snapshot for time {t} in {Path(run_dir)} (have: {snapshot_times(run_dir)})")
    data = read_verified(path)
    try:
        return load_safetensors(data)
    except Exception as error:  # safetensors raises its own error types for corrupt files
        raise InputError(f"snapshot file {path} is unreadable: {error}") from None


def check_snapshot_progress(run_dir: str | os.PathLike) -> None:
    """InputError if two neighbouring snapshots are byte-identical although training moved between
    them, i.e. the writer is stuck. Training moved when the logged full-batch loss
    changed (ensembles: ``epoch`` rows) or when some step between them had a learning rate above
    zero (language models: ``step`` rows; AdamW then moves every weight)."""
    files = _snapshot_files(run_dir)
    if len(files) < 2 or not (Path(run_dir) / "metrics.jsonl").is_file():
        return
    rows = read_metric_rows(run_dir)
    names = {path.name: t for t, path in sorted(files.items())}
    if rows and "step" in rows[0]:
        lrs = {r["step"]: r["lr"] for r in rows if "lr" in r}

        def moved(a: str, b: str) -> bool:
            return any(lrs.get(s, 0.0) > 0 for s in range(names[a], names[b]))
    else:
        _check_keys(run_dir, rows, ("epoch", "loss"))  # a damaged row is named, not a KeyError
        losses: dict[int, list[float]] = {}
        for row in rows:
            losses.setdefault(int(row["epoch"]), []).append(float(row["loss"]))

        def moved(a: str, b: str) -> bool:
            return not np.array_equal(losses.get(names[a], []), losses.get(names[b], []), equal_nan=True)

    check_progress(Path(run_dir) / SNAPSHOT_DIR, list(names), moved)


def write_metrics(run_dir: str | os.PathLike, rows: list[dict]) -> None:
    """Write ``metrics.jsonl`` atomically: one JSON object per row, in order. The one schema of
    every trainer: the time (``epoch`` or ``step``), ``member`` for ensembles, and the measurements."""
    atomic_write_text(Path(run_dir) / "metrics.jsonl", "".join(json.dumps(row) + "\n" for row in rows))


def read_metric_rows(run_dir: str | os.PathLike) -> list[dict]:
    """The rows of ``metrics.jsonl`` as written (an empty list when there is none yet); InputError
    naming the file and line (:func:`damaged`) for a line that is not a JSON object with the time
    (``epoch`` or ``step``), or a file cut short."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = []
    for line, text in enumerate(_read_text(run_dir, "metrics.jsonl").splitlines(), start=1):  # a cut row is not JSON
        if text.strip():
            try:
                row = json.loads(text)
            except json.JSONDecodeError as error:
                raise damaged(path, f"not a JSON object ({error.msg})", line) from None
            if not isinstance(row, dict) or not ("epoch" in row or "step" in row):
                raise damaged(path, "a row without its epoch or step", line)
            rows.append(row)
    return rows


def read_metrics(run_dir: str | os.PathLike) -> dict[str, np.ndarray]:
    """``metrics.jsonl`` of an ensemble run as columns ``member``, ``epoch`` (int) and ``loss``,
    ``acc`` (float), file order. InputError if the file is missing or damaged (a row without one of
    the four: named with its line)."""
    if not (Path(run_dir) / "metrics.jsonl").is_file():
        _read_text(run_dir, "metrics.jsonl")  # the missing-file message
    rows = read_metric_rows(run_dir)
    _check_keys(run_dir, rows, ("member", "epoch", "loss", "acc"))
    return {
        "member": np.array([r["member"] for r in rows], dtype=np.int64),
        "epoch": np.array([r["epoch"] for r in rows], dtype=np.int64),
        "loss": np.array([r["loss"] for r in rows], dtype=np.float64),
        "acc": np.array([r["acc"] for r in rows], dtype=np.float64),
    }


def _check_keys(run_dir: str | os.PathLike, rows: list[dict], keys: Sequence[str]) -> None:
    """InputError naming ``metrics.jsonl`` and the row (:func:`damaged`) for the first of ``rows`` without
    one of ``keys``."""
    for line, row in enumerate(rows, start=1):
        missing = [key for key in keys if key not in row]
        if missing:
            raise damaged(Path(run_dir) / "metrics.jsonl", f"row {line} has no {', '.join(missing)}")


def write_alignment(run_dir: str | os.PathLike, rows: list[dict]) -> None:
    """Write ``alignment.csv`` with :data:`ALIGNMENT_COLUMNS`; NaN is written as an empty field."""
    write_table(run_dir, "alignment.csv", ALIGNMENT_COLUMNS, rows)


def write_table(run_dir: str | os.PathLike, name: str, columns: Sequence[str], rows: list[dict]) -> None:
    """Write the CSV file ``name`` with a header of ``columns``, atomically; floats are written exactly
    (``repr``), NaN and None as an empty field, booleans as ``true``/``false``."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_value(row[k]) for k in columns})
    atomic_write_text(Path(run_dir) / name, buffer.getvalue())


def read_table(run_dir: str | os.PathLike, name: str, ints: Sequence[str] = (), strings: Sequence[str] = (),
               columns: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """A CSV file of :func:`write_table` as columns: ``ints`` as int64, ``strings`` as str, every
    other column as float64 (NaN where empty). InputError naming the file and line (:func:`damaged`)
    when the header lacks one of ``columns`` (default: ``ints`` and ``strings``), a row has another
    number of fields than the header, a value is not a number, or the file was cut short."""
    path = Path(run_dir) / name
    lines = list(csv.reader(io.StringIO(_read_whole(run_dir, name))))
    if not lines:
        raise damaged(path, "empty: no header")
    header, rows = lines[0], lines[1:]
    missing = [key for key in (*columns, *ints, *strings) if key not in header]
    if missing:
        raise damaged(path, f"the header has no {', '.join(missing)}", 1)
    table = {key: [] for key in header}
    for line, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise damaged(path, f"{len(row)} fields where the header has {len(header)}", line)
        for key, value in zip(header, row, strict=True):
            try:
                table[key].append(value if key in strings else int(value) if key in ints
                                  else float(value) if value else np.nan)
            except ValueError:
                raise damaged(path, f"{key} is {value!r}, not a number", line) from None
    return {key: np.array(values, dtype=np.int64 if key in ints else str if key in strings else np.float64)
            for key, values in table.items()}


def read_alignment(run_dir: str | os.PathLike) -> dict[str, np.ndarray]:
    """``alignment.csv`` as columns: ``member``, ``epoch`` (int), ``signature`` (str), ``pearson``,
    ``spearman``, ``one_minus_mse`` (float, NaN where empty), ``defined`` (bool); InputError naming
    the file and line when it is not what :func:`write_alignment` wrote."""
    table = read_table(run_dir, "alignment.csv", ints=("member", "epoch"), strings=("signature", "defined"),
                       columns=ALIGNMENT_COLUMNS)
    table["defined"] = table["defined"] == "true"
    return table


def alignment_series(table: dict[str, np.ndarray], signature: str, member: int, column: str = "pearson"):
    """(epochs, values) of one signature and member from :func:`read_alignment`'s table, by epoch."""
    keep = (table["signature"] == signature) & (table["member"] == member)
    order = np.argsort(table["epoch"][keep])
    return table["epoch"][keep][order], table[column][keep][order]


def read_npz(run_dir: str | os.PathLike, name: str, keys: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file of the directory (nothing unpickled); InputError when it is
    missing, naming the file (:func:`damaged`) when it is not a readable ``.npz`` or lacks one of
    ``keys``."""
    path = Path(run_dir) / name
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except FileNotFoundError:
        raise InputError(f"{path} not found: is {Path(run_dir)} a ctxstair output directory?") from None
    except Exception as error:  # zipfile and numpy raise several types for a damaged file
        raise damaged(path, f"not a readable .npz ({error})") from None
    missing = [key for key in keys if key not in arrays]
    if missing:
        raise damaged(path, f"no array {', '.join(missing)}")
    return arrays


def read_signatures(run_dir: str | os.PathLike) -> SignatureHierarchy:
    """``signatures.npz`` of a run directory as a :class:`~ctxstair.signatures.SignatureHierarchy`
    (``tokens`` (T,), ``labels`` (K_l,), ``context`` (P,), ``occurrence`` (V,), ``orders`` =
    (order0 (T, K_l), order1 (T, K_l, P), ...) as present). InputError if missing or incomplete."""
    arrays = read_npz(run_dir, "signatures.npz", keys=("tokens", "labels", "context", "occurrence", "order0"))
    orders = []
    while f"order{len(orders)}" in arrays:
        orders.append(arrays[f"order{len(orders)}"])
    return SignatureHierarchy(tokens=arrays["tokens"], labels=arrays["labels"], context=arrays["context"],
                              occurrence=arrays["occurrence"], orders=tuple(orders))


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far, in MiB (``getrusage``; KiB on Linux, bytes on macOS)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def write_resources(run_dir: str | os.PathLike, seconds: float, plan: dict | None = None) -> None:
    """Write ``resources.json``: the process's peak resident memory (MiB) and the seconds this
    training session took (after a resume, the resumed part only). Machine-dependent, so it is the
    one file of a run directory that differs between identical runs. ``numerics``
    records the floating-point set-up the numbers were computed with (:func:`ctxstair.numerics.settings`);
    ``plan``, when given, the ensemble engine's execution plan (:mod:`ctxstair.train.plan`)."""
    record = {"peak_rss_mib": round(peak_rss_mib(), 1), "seconds": round(seconds, 3), "numerics": numerics.settings()}
    write_json(run_dir, "resources.json", record | ({"plan": plan} if plan is not None else {}))


def read_plan(run_dir: str | os.PathLike) -> dict | None:
    """The execution plan recorded in ``resources.json`` (:func:`write_resources`), None when the
    directory has no such file or the file no plan (a run trained before plans were recorded)."""
    if not (Path(run_dir) / "resources.json").is_file():
        return None
    return read_json(run_dir, "resources.json").get("plan")


def write_json(run_dir: str | os.PathLike, name: str, payload: dict) -> None:
    """Write ``name`` (e.g. ``summary.json``) as indented JSON, atomically; NaN becomes null."""
    atomic_write_text(Path(run_dir) / name, json.dumps(_json_safe(payload), indent=2) + "\n")


def read_json(run_dir: str | os.PathLike, name: str, keys: Sequence[str] = ()) -> dict:
    """Parse a JSON file of the run directory: an object holding ``keys``; InputError naming the
    file (:func:`damaged`) when it is not valid JSON, not an object, lacks a key or was cut short."""
    path = Path(run_dir) / name
    try:
        payload = json.loads(_read_text(run_dir, name))  # JSON ends itself: a cut file is not JSON
    except json.JSONDecodeError as error:
        raise damaged(path, f"not valid JSON ({error.msg})", error.lineno) from None
    if not isinstance(payload, dict):
        raise damaged(path, f"a JSON {type(payload).__name__}, not an object")
    missing = [key for key in keys if key not in payload]
    if missing:
        raise damaged(path, f"no {', '.join(missing)}")
    return payload


def damaged(path: Path, problem: str, line: int | None = None) -> InputError:
    """The one-line refusal of a file that is not what ctxstair wrote: the file (and line), the
    problem, and what to do."""
    where = f"{path}:{line}" if line is not None else str(path)
    return InputError(f"{where}: {problem}: the file is damaged or was not written by ctxstair; restore it, "
                      "or run the command that wrote it again")


def _read_whole(run_dir: str | os.PathLike, name: str) -> str:
    """The text of a CSV or YAML file of the run directory, which its writer ends with a newline: a
    file that does not was cut short (a copy or a disk that stopped mid-file), and unlike JSON these
    formats would read the part that is left (a number cut to fewer digits) without a complaint."""
    text = _read_text(run_dir, name)
    if text and not text.endswith("\n"):
        raise damaged(Path(run_dir) / name, "cut short (no newline at its end)")
    return text


def _read_text(run_dir: str | os.PathLike, name: str) -> str:
    path = Path(run_dir) / name
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path} not found: is {Path(run_dir)} a ctxstair run directory?") from None
    except UnicodeDecodeError:
        raise damaged(path, "not UTF-8 text") from None
    except OSError as error:
        raise InputError(f"{path} cannot be read: {error.strerror}") from None


def _csv_value(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (float, np.floating)):
        return "" if np.isnan(value) else repr(float(value))
    return str(value)


def _json_safe(value):
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if np.isnan(value) else float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value

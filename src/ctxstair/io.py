"""Atomic file output: nothing half-written is ever visible under its final name.

Files are written to a temporary sibling and renamed; an output directory is assembled under a
temporary name and renamed into place when complete, so an error or interruption leaves no partial
run behind.
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ctxstair.errors import InputError


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """UTF-8 text version of :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_save_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """Save named arrays as a compressed ``.npz`` (no pickled objects) atomically.

    Byte-for-byte reproducible: ``np.savez_compressed`` stamps each zip entry with the current
    time, so the entries are written here with a fixed one (1980-01-01), and the same arrays
    always give the same file (what lets a resumed run be compared bitwise with another)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, array in arrays.items():
            entry = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            entry.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(entry, "w") as handle:
                np.lib.format.write_array(handle, np.asanyarray(array), allow_pickle=False)
    atomic_write_bytes(path, buffer.getvalue())


@contextlib.contextmanager
def fresh_output_dir(out: str | os.PathLike, force: bool = False) -> Iterator[Path]:
    """Yield a temporary directory that becomes ``out`` only if the block finishes without error.

    An existing ``out`` is refused (InputError) unless ``force``; with ``force`` it is replaced only
    once the new contents are complete.
    """
    out = Path(out)
    if out.exists() and not force:
        raise InputError(f"output directory {out} already exists; pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".{glob.escape(out.name)}.*.partial"):  # left by a killed earlier attempt
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial"))
    try:
        yield staging
        if out.exists():
            retired = staging.with_suffix(".old")
            os.replace(out, retired)
            os.replace(staging, out)
            shutil.rmtree(retired)
        else:
            os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def remove_stale_temporaries(root: str | os.PathLike) -> int:
    """Delete the temporary files that :func:`atomic_write_bytes` leaves behind when the process is
    killed mid-write (``.<name>.<random>.tmp``) anywhere under ``root``; return how many. Called
    when a run is resumed, so that a killed run leaves no litter once it is finished."""
    removed = 0
    for path in Path(root).rglob(".*.tmp"):
        if path.is_file():
            path.unlink(missing_ok=True)
            removed += 1
    return removed

"""Atomic file output: nothing half-written is ever visible under its final name.

Files are written to a temporary sibling and renamed; an output directory is assembled under a
temporary name and renamed into place when complete, so an error or interruption leaves no partial
run behind.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

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
    """Save named arrays as a compressed ``.npz`` (no pickled objects) atomically."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
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

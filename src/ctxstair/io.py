"""Atomic file output: nothing half-written is ever visible under its final name.

Files are written to a temporary sibling and renamed; an output directory is assembled under a
temporary name and renamed into place when complete, so an error or interruption leaves no partial
run behind. Files and folders are created with the process's umask, as ``open`` and ``mkdir`` do
(0644 and 0755 under umask 022), so that a lab's shared results folder or a web server can read
them; Python's ``tempfile`` would make them 0600 and 0700 whatever the umask.

:func:`claim_output` is the one rule for an output folder that a command creates, resumes or
replaces (training runs, recipes, sweeps, analyze-model's checkpoint series).
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import secrets
import shutil
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ctxstair.errors import InputError


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    # O_EXCL: a fresh file of our own; mode 0o666 is narrowed by the umask, as open() would.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
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


def _staging_dir(out: Path) -> Path:
    """A new empty folder next to ``out`` (``.<name>.<random>.partial``), made with the umask's mode;
    the ones a killed earlier attempt left behind are removed first."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".{glob.escape(out.name)}.*.partial"):
        shutil.rmtree(stale, ignore_errors=True)
    staging = out.parent / f".{out.name}.{secrets.token_hex(4)}.partial"
    staging.mkdir()
    return staging


def _replace_with(out: Path, new: Path) -> None:
    """Put the complete folder ``new`` at ``out``; an existing ``out`` is removed only after it has been
    moved aside, so an interruption leaves one of the two complete (:func:`_finish_interrupted_swap`)."""
    if out.exists():
        retired = _retired(out)
        os.replace(out, retired)
        os.replace(new, out)
        shutil.rmtree(retired)
    else:
        os.replace(new, out)


def _retired(out: Path) -> Path:
    return out.parent / f".{out.name}.retired"


def _replacement(out: Path) -> Path:
    return out.parent / f".{out.name}.replacing"


def _finish_interrupted_swap(out: Path) -> None:
    """Complete a :func:`_replace_with` that was interrupted between its two renames: the old folder is
    retired and the new one, complete, is still at its temporary name."""
    retired = _retired(out)
    if not retired.exists():
        return
    if not out.exists():
        for new in (_replacement(out), *out.parent.glob(f".{glob.escape(out.name)}.*.complete")):
            if new.is_dir():
                os.replace(new, out)
                break
        else:  # nothing newer to put in place: the retired folder is the output
            os.replace(retired, out)
            return
    shutil.rmtree(retired, ignore_errors=True)


@contextlib.contextmanager
def fresh_output_dir(out: str | os.PathLike, force: bool = False) -> Iterator[Path]:
    """Yield a temporary directory that becomes ``out`` only if the block finishes without error.

    An existing ``out`` is refused (InputError) unless ``force``; with ``force`` it is replaced only
    once the new contents are complete.
    """
    out = Path(out)
    _finish_interrupted_swap(out)
    if out.exists() and not force:
        raise InputError(f"output directory {out} already exists; pass --force to replace it")
    staging = _staging_dir(out)
    try:
        yield staging
        complete = staging.with_name(staging.name.removesuffix(".partial") + ".complete")
        os.replace(staging, complete)
        _replace_with(out, complete)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@dataclass
class Output:
    """An output folder claimed by :func:`claim_output`.

    Attributes:
        final: where the output lives when complete (the ``out`` that was asked for).
        path: where to write now: ``final``, or, while an existing output is being replaced, the
            replacement ``.<name>.replacing`` next to it.
        resumed: whether an existing output (or replacement) is continued rather than started.
    """

    final: Path
    path: Path
    resumed: bool

    def commit(self) -> None:
        """Mark the output complete: a replacement takes the place of the old output (which is removed
        only now); nothing to do for an output that was written in place."""
        if self.path != self.final:
            _replace_with(self.final, self.path)
            self.path = self.final


def claim_output(out: str | os.PathLike, *, resume: bool, force: bool, start: Callable[[Path], None],
                 same: Callable[[Path], None] | None = None, what: str = "output directory") -> Output:
    """The one rule for an output folder that a command creates, continues or replaces.

    * ``out`` does not exist: it appears whole, with the files ``start(folder)`` writes (a config, a
      settings file), and the work continues in it.
    * ``resume``: an existing output is continued, after ``same(folder)`` has checked that it is this
      work's (InputError otherwise); an interrupted replacement (below) is continued rather than the
      old output. ``resume`` of an output that does not exist starts it, so a job script may always
      pass it. ``same=None``: the output cannot be resumed (InputError).
    * ``force``: an existing output is replaced, but only once the replacement is complete: the new
      output is built at ``.<name>.replacing`` next to it (``Output.path``) and takes its place at
      :meth:`Output.commit`. Until then the old output stays as it was.
    * neither: InputError, before anything is written.

    Temporaries left by a killed writer are cleared when an output is continued."""
    out = Path(out)
    folder = check_output(out, resume=resume, force=force, same=same, what=what)
    if folder is not None:
        remove_stale_temporaries(folder)
        return Output(out, folder, resumed=True)
    replacement = _replacement(out)
    staging = _staging_dir(out)
    try:
        start(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out.exists():  # replaced once the replacement is complete (Output.commit)
        shutil.rmtree(replacement, ignore_errors=True)
        os.replace(staging, replacement)
        return Output(out, replacement, resumed=False)
    os.replace(staging, out)
    return Output(out, out, resumed=False)


def check_output(out: str | os.PathLike, *, resume: bool, force: bool, same: Callable[[Path], None] | None = None,
                 what: str = "output directory") -> Path | None:
    """What :func:`claim_output` would do with ``out``, checked without writing anything (so a command
    can refuse before its expensive work): the folder to continue with ``resume`` (after ``same``
    checked it), or None when a new output would be started; InputError when it would refuse."""
    out = Path(out)
    _finish_interrupted_swap(out)
    replacement = _replacement(out)
    if resume and (replacement.exists() or out.exists()):
        if same is None:
            raise InputError(f"{out} cannot be resumed; use --force to replace it")
        folder = replacement if replacement.exists() else out
        same(folder)
        return folder
    if out.exists() and not force:
        raise InputError(f"{what} {out} already exists; use --resume to continue it or --force to replace it")
    return None


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

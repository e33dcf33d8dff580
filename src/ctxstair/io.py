"""Atomic file output: nothing half-written is ever visible under its final name.

Files are written to a temporary sibling and renamed; an output directory is assembled under a
temporary name and renamed into place when complete, so an error or interruption leaves no partial
run behind. Files and folders are created with the process's umask, as ``open`` and ``mkdir`` do
(0644 and 0755 under umask 022), so that a lab's shared results folder or a web server can read
them; Python's ``tempfile`` would make them 0600 and 0700 whatever the umask.

:func:`claim_output` is the one rule for an output folder that a command creates, resumes or
replaces (training runs, recipes, sweeps, analyze-model's checkpoint series).

Every finished output keeps a record of its files, ``ctxstair.sha256`` (:data:`RECORD`), in the format
of ``sha256sum`` (so ``sha256sum -c ctxstair.sha256`` checks it without ctxstair): the folder is
recorded when it is complete (:meth:`Output.commit`, :func:`fresh_output_dir`), and every later
atomic write into a recorded folder updates its entry, so a file changed by anything else is found
by ``ctxstair verify``; files are removed from an output with :func:`remove_output`, which drops
their entries.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
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
    """Write ``data`` to ``path`` through a temporary file in the same directory, then rename. In a
    recorded output the record takes the new file's SHA-256 before the rename: a kill between the two
    then leaves a record ahead of a file that is missing or about to be written again, which a resume
    writes; the other order left a file in place that the record did not list, and a resume that skips
    work whose file exists (an analysis) kept it so."""
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
        _note_written(path, data)
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
        record_output(staging)
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
        only now); nothing to do for an output that was written in place. Either way the output's
        files are recorded (:func:`record_output`)."""
        record_output(self.path)
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


# ---------------------------------------------------------------------------- the record of an output

#: The record of a finished output folder: one ``<sha256>  <relative path>`` line per file, sorted.
RECORD = "ctxstair.sha256"


def record_output(folder: str | os.PathLike) -> int:
    """Write the record of every file of ``folder`` (:func:`recorded_files`); return how many."""
    folder = Path(folder)
    files = {name: digest(path.read_bytes()) for name, path in recorded_files(folder).items()}
    _write_record(folder, files)
    return len(files)


def recorded_files(folder: str | os.PathLike) -> dict[str, Path]:
    """The files a record of ``folder`` covers, by relative POSIX path: every file below it except the
    record itself, temporaries (names starting with a dot) and the files of a subfolder that is an
    output with a record of its own (an exported model, a sweep's cell), which that record lists."""
    folder = Path(folder)
    files: dict[str, Path] = {}
    for parent, dirs, names in os.walk(folder):
        here = Path(parent)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (here / d / RECORD).is_file())
        for name in names:
            if not name.startswith(".") and not (here == folder and name == RECORD):
                files[(here / name).relative_to(folder).as_posix()] = here / name
    return dict(sorted(files.items()))


def read_record(folder: str | os.PathLike) -> dict[str, str] | None:
    """The record of ``folder`` as {relative path: SHA-256}, or None when it has none; InputError
    naming it when a line is not ``<64 hex digits>  <path>``."""
    path = Path(folder) / RECORD
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not a record of SHA-256 sums (not UTF-8 text); remove it and run the "
                         "command that wrote the folder again") from None
    files = {}
    for number, line in enumerate(text.splitlines(), start=1):
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest) or not name:
            raise InputError(f"{path}:{number}: not a '<sha256>  <file>' line; the record is damaged: remove it "
                             "and run the command that wrote the folder again")
        files[name] = digest
    return files


def remove_output(path: str | os.PathLike) -> None:
    """Remove a file or folder of an output (nothing when it is not there) and its entries from the
    output's record."""
    path = Path(path)
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    folder = _recorded_folder(path)
    if folder is None:
        return
    name = path.relative_to(folder).as_posix()
    with _locked(folder):
        files = read_record(folder) or {}
        kept = {n: d for n, d in files.items() if n != name and not n.startswith(name + "/")}
        if kept != files:
            _write_record(folder, kept)


def _recorded_folder(path: Path) -> Path | None:
    """The recorded output ``path`` belongs to: the nearest of its folder and the folder above that
    holds a record (outputs keep their files at most one folder deep: ``figures/``, ``snapshots/``);
    None for a temporary or the record itself, or outside a recorded output."""
    if path.name == RECORD or path.name.startswith("."):
        return None
    for folder in (path.parent, path.parent.parent):
        if (folder / RECORD).is_file():
            return None if path.relative_to(folder).as_posix().startswith(".") else folder
    return None


def digest(data: bytes) -> str:
    """SHA-256 of ``data`` as 64 hex digits (the records here, the manifests of :mod:`ctxstair.integrity`)."""
    return hashlib.sha256(data).hexdigest()


def _write_record(folder: Path, files: dict[str, str]) -> None:
    atomic_write_bytes(folder / RECORD, "".join(f"{d}  {n}\n" for n, d in sorted(files.items())).encode("utf-8"))


def _note_written(path: Path, data: bytes) -> None:
    """Update the record of the output ``path`` belongs to, if that output is recorded already."""
    folder = _recorded_folder(path)
    if folder is None:
        return
    with _locked(folder):
        files = read_record(folder) or {}
        files[path.relative_to(folder).as_posix()] = digest(data)
        _write_record(folder, files)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder`` (a record's read-update-write is not interleaved with
    another process's); a no-op where ``fcntl`` does not exist."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)

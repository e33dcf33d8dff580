"""Verified artefacts: SHA-256 manifests of snapshot folders and checkpoints.

A folder of snapshots keeps ``manifest.json``, ``{"algorithm": "sha256", "files": {name: hex}}``.
:func:`write_verified` writes a file atomically and then records its hash (so a file without an
entry was interrupted between the two and is rewritten when the run resumes);
:func:`read_verified` checks the hash before returning the bytes, so a corrupted or truncated
file is an :class:`~ctxstair.errors.InputError` naming it, never silently wrong numbers.
:func:`check_progress` flags two neighbouring snapshots that are byte-identical although training
moved between them (a stuck writer). Checkpoints carry their hash in their own commit file
(``checkpoint/state.json``), checked by :func:`check_digest`.

Folders written before manifests existed (no ``manifest.json``) are read without verification.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from ctxstair.errors import InputError
from ctxstair.io import atomic_write_bytes, atomic_write_text, digest

MANIFEST = "manifest.json"


def write_verified(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, then record its SHA-256 in the folder's manifest."""
    path = Path(path)
    atomic_write_bytes(path, data)
    files = _manifest(path.parent) or {}
    files[path.name] = digest(data)
    atomic_write_text(path.parent / MANIFEST, json.dumps({"algorithm": "sha256", "files": dict(sorted(files.items()))},
                                                         indent=1) + "\n")


def read_verified(path: str | Path) -> bytes:
    """The bytes of ``path`` after checking them against the folder's manifest (if it has one).

    InputError naming the file when it is missing, absent from the manifest (written but never
    committed), or its hash differs (corrupted or truncated)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path} is missing") from None
    files = _manifest(path.parent)
    if files is None:
        return data
    if path.name not in files:
        raise InputError(f"{path} is not in {path.parent / MANIFEST}: it was not completely written "
                         "(resume the run to rewrite it)")
    check_digest(path, data, files[path.name], path.parent / MANIFEST)
    return data


def check_digest(path: Path, data: bytes, expected: str, record: Path | None = None) -> None:
    """InputError naming ``path`` unless ``data`` has the SHA-256 ``expected`` (which ``record``, when
    given, holds: named in the message)."""
    actual = digest(data)
    if actual != expected:
        where = "its record" if record is None else str(record)
        raise InputError(f"{path} is corrupted or truncated: its SHA-256 is {actual[:12]}…, {where} "
                         f"records {expected[:12]}… ({len(data)} bytes read)")


def verify_folder(folder: str | Path) -> int:
    """Check every file of a folder's manifest (and that every recorded file exists); return how
    many were checked (0 without a manifest)."""
    folder = Path(folder)
    files = _manifest(folder) or {}
    for name in files:
        read_verified(folder / name)
    return len(files)


def check_progress(folder: str | Path, names: Sequence[str], moved: Callable[[str, str], bool]) -> None:
    """Flag a stuck writer: InputError if two neighbouring files of ``names`` (in training order)
    have the same SHA-256 although ``moved(a, b)`` says training changed the weights between them."""
    folder = Path(folder)
    files = _manifest(folder)
    if files is None:
        return
    for a, b in zip(names, names[1:]):
        if a in files and files.get(b) == files[a] and moved(a, b):
            raise InputError(f"{folder / a} and {folder / b} are byte-identical although training moved between "
                             "them: a snapshot writer is stuck or a file was copied over another")


def _manifest(folder: Path) -> dict[str, str] | None:
    """The manifest's ``files`` mapping, or None when the folder has none."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files = data["files"]
        if data.get("algorithm") != "sha256" or not isinstance(files, dict):
            raise ValueError("not a sha256 manifest")
    except (ValueError, KeyError, TypeError) as error:
        raise InputError(f"{path} is unreadable ({error})") from None
    return {str(k): str(v) for k, v in files.items()}

"""Work units of a corpus count and what one unit counts (the map step; the sum is in
:mod:`ctxstair.corpus.count`).

A unit is a range of windows of one source. Every unit is counted on its own, by whichever
worker gets it, from nothing but a picklable :class:`Job` and the :class:`Unit`, so the local and
the Ray executors run the same function (:func:`count_unit`). Two passes:

* ``unigram``: occurrences of every id inside windows, at positions >= 1 of a window (the prefix
  labels' ranking), and optionally every pair of consecutive tokens (the full bigram table) and
  the word-group pairs of ``ctxstair semantics`` per block of positions;
* ``rows``: for the tracked tokens T (chosen after the first pass, or given), the next-token rows
  over the whole vocabulary and the first-order prefix counts (T × labels × T).

Counts are int64 (exact) except the next-token rows and prefix counts of one unit, int32: a unit
holds fewer than 2^31 tokens (:data:`MAX_UNIT_TOKENS`), so no count of one unit can reach 2^31, and
the unit files, written by a worker and read back by the sum, take half the bytes. The ``rows`` pass counts
with the compiled loops of :mod:`ctxstair.signatures.kernels` (the same loop as
:func:`~ctxstair.signatures.prefix_counts`), on the ids as they are stored.
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from ctxstair.corpus.megatron import pair_paths
from ctxstair.corpus.sources import open_source, windows
from ctxstair.errors import InputError
from ctxstair.signatures.blocks import block_pair_counts
from ctxstair.signatures.prefix import index_map

try:
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # numpy < 2
    from numpy.core.multiarray import _set_madvise_hugepage

#: Tokens per piece read from a source and counted at once: bounded working memory per worker.
PIECE_TOKENS = 1 << 23
#: Largest unit: its int32 counts cannot overflow.
MAX_UNIT_TOKENS = 1 << 30
UNIGRAM, ROWS = "unigram", "rows"


@dataclass(frozen=True)
class SourceSpec:
    """How to open one source again in any process (:func:`ctxstair.corpus.sources.open_source`)."""

    path: str
    kind: str | None = None
    dtype: str | None = None
    column: str | None = None


@dataclass(frozen=True)
class Unit:
    """Windows ``first..stop-1`` of source ``source`` in pass ``phase``; ``index`` numbers the units
    of a pass in corpus order, ``offset`` is the corpus-wide number of the unit's first window."""

    phase: str
    index: int
    source: int
    first: int
    stop: int
    offset: int = 0

    @property
    def name(self) -> str:
        """The unit's file stem in the work folder."""
        return f"{self.phase}-{self.index:06d}"


@dataclass(frozen=True)
class Job:
    """What every unit of a count shares: sources, windows, vocabulary, and the tracked tokens and
    labels of the ``rows`` pass (None in the ``unigram`` pass), and the word-group rows (the token ids
    of each word) with their block size."""

    sources: tuple[SourceSpec, ...]
    window: int
    documents: str
    vocab_size: int
    bigram: bool = False
    tokens: tuple[int, ...] | None = None
    labels: tuple[int, ...] | None = None
    next_rows: bool = True
    groups: tuple[tuple[int, ...], ...] | None = None
    block_tokens: int = 1000


def window_index(spec: SourceSpec, window: int, documents: str):
    """The windows of a source (:func:`ctxstair.corpus.sources.windows`), opened once per process and
    version of its files. A file written again under the same name, or another file that the same
    relative path reaches from another working directory (a notebook that counts ``train.bin`` in two
    folders), is opened afresh: an index kept by the path alone would count the old windows, or refuse
    the new ones as out of range."""
    return _open_windows(spec, window, documents, _file_versions(spec))


@functools.lru_cache(maxsize=64)
def _open_windows(spec: SourceSpec, window: int, documents: str, versions: tuple):
    # A spec is made from a source already opened, and refused, in the count's own process.
    source = open_source(spec.path, kind=spec.kind, dtype=spec.dtype, column=spec.column, text_ok=True)
    return windows(source, window, documents)


def _file_versions(spec: SourceSpec) -> tuple:
    """The real path, device, inode, size and modification time (ns) of each file of the source (a
    Megatron source's ``.bin`` and ``.idx``); a file that cannot be read is left to ``open_source``,
    which names it."""
    files = pair_paths(spec.path) if spec.kind == "megatron" else (Path(spec.path),)
    versions = []
    for file in files:
        try:
            stat = os.stat(file)
        except OSError:
            versions.append((str(file),))
            continue
        versions.append((os.path.realpath(file), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(versions)


def split_units(phase: str, counts: list[int], window: int, unit_tokens: int) -> list[Unit]:
    """Units of about ``unit_tokens`` tokens (whole windows, at least one) over sources with ``counts``
    windows each, in corpus order."""
    per_unit = max(1, min(unit_tokens, MAX_UNIT_TOKENS) // window)
    units, offset = [], 0
    for source, n in enumerate(counts):
        for first in range(0, n, per_unit):
            units.append(Unit(phase, len(units), source, first, min(n, first + per_unit), offset + first))
        offset += n
    return units


def pieces(job: Job, unit: Unit):
    """The unit's windows in pieces of about :data:`PIECE_TOKENS` tokens: ``(first, windows)``, the
    corpus-wide number of the piece's first window and (r, window) ids in the stored dtype when
    numpy indexes with it as it is (int64 otherwise), each checked against V (InputError naming the
    source). Counting on the stored dtype saves an int64 copy of every piece: a uint16 file is read
    and counted as it is stored, a quarter of the bytes."""
    index = window_index(job.sources[unit.source], job.window, job.documents)
    spec = job.sources[unit.source]
    step = max(1, PIECE_TOKENS // job.window)
    for first in range(unit.first, unit.stop, step):
        piece = index.read(first, min(unit.stop, first + step), None)  # checked in the stored dtype
        top, bottom = int(piece.max()), int(piece.min()) if piece.dtype.kind == "i" else 0
        if top >= job.vocab_size or bottom < 0:
            bad = top if top >= job.vocab_size else bottom
            where = int(np.argmax(((piece >= job.vocab_size) | (piece < 0)).any(axis=1)))
            raise InputError(f"{spec.path} holds token id {bad}, outside the vocabulary of {job.vocab_size} ids "
                             f"(window {first + where})")
        if not np.can_cast(piece.dtype, np.intp):  # uint64: numpy does not index with it
            piece = piece.astype(np.int64)
        yield unit.offset + first - unit.first, piece


def count_unit(job: Job, unit: Unit) -> dict[str, np.ndarray]:
    """The counts of one unit (module docstring), as named arrays."""
    with ordinary_pages():
        return _count_unigram(job, unit) if unit.phase == UNIGRAM else _count_rows(job, unit)


@contextlib.contextmanager
def ordinary_pages():
    """Inside the block, numpy does not ask the kernel for transparent huge pages; the setting it had
    is restored on exit. numpy advises huge pages (``madvise``) for every array of 4 MiB or more.
    On the 2-core virtual machine the benchmarks ran on, the first touch of a fresh huge page, once
    a count had filled the page cache with its token and unit files, cost milliseconds of system
    time (the kernel's compaction counters stayed at zero: the time went to backing the memory), so
    the counts' fresh arrays (40–320 MB) were up to ten times slower to touch first: 4.3 s instead
    of 0.6 s for the CSR of the prefix counts, most of a 100 M-token count's serial part
    (benchmarks/RESULTS.md, "Corpus statistics"). Only the speed changes, never a number."""
    previous = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(previous)


def save_unit(work: Path, unit: Unit, arrays: dict[str, np.ndarray]) -> None:
    """Write a unit's arrays to ``work/<unit.name>.safetensors`` atomically (a kill leaves the file
    whole or absent; the count's completion record is written after it)."""
    temporary = work / f".{unit.name}.tmp"
    save_file({name: np.ascontiguousarray(a) for name, a in arrays.items()}, str(temporary))
    os.replace(temporary, work / f"{unit.name}.safetensors")


def count_and_save(job: Job, unit: Unit, work: str) -> None:
    """Count one unit and write its file (:func:`save_unit`): what a local worker runs, so that its
    counts reach the disk without passing through the pipe to the parent (≈ 1 s per 240 MB unit)."""
    save_unit(Path(work), unit, count_unit(job, unit))


def _count_unigram(job: Job, unit: Unit) -> dict[str, np.ndarray]:
    V = job.vocab_size
    unigram, later = np.zeros(V, dtype=np.int64), np.zeros(V, dtype=np.int64)
    pairs, grouped, has_next = [], [], np.zeros(V, dtype=np.int64)
    for first, piece in pieces(job, unit):
        unigram += np.bincount(piece.ravel(), minlength=V)
        later += np.bincount(piece[:, 1:].ravel(), minlength=V)
        if job.bigram:
            keys, counts = np.unique(piece[:, :-1].astype(np.int64) * V + piece[:, 1:], return_counts=True)
            pairs.append((keys, counts))
        if job.groups is not None:
            has_next += np.bincount(piece[:, :-1].ravel(), minlength=V)
            block, row, nxt, count = block_pair_counts(piece.astype(np.int64), job.groups, job.block_tokens,
                                                       first * job.window)
            grouped.append(((block * len(job.groups) + row) * V + nxt, count))
    out = {"unigram": unigram, "next_position": later}
    if job.bigram:
        out["bigram.keys"], out["bigram.counts"] = sum_sparse(pairs)
    if job.groups is not None:
        out["has_next"] = has_next
        out["groups.keys"], out["groups.counts"] = sum_sparse(grouped)
    return out


def _count_rows(job: Job, unit: Unit) -> dict[str, np.ndarray]:
    from ctxstair.signatures import kernels  # numba is imported only when something is counted

    V = job.vocab_size
    tokens = np.asarray(job.tokens, dtype=np.int64)
    row_of = index_map(tokens, V)
    out = {}
    # int32: a unit holds fewer than 2^31 tokens (MAX_UNIT_TOKENS), so no count of it can overflow.
    if job.next_rows:
        out["next_rows"] = np.zeros((tokens.size, V), dtype=np.int32)
    if job.labels is not None:
        label_index = index_map(np.asarray(job.labels, dtype=np.int64), V)
        out["prefix_counts"] = np.zeros((tokens.size, len(job.labels), tokens.size), dtype=np.int32)
        out["events"] = np.zeros(tokens.size, dtype=np.int64)
    for _, piece in pieces(job, unit):  # ids checked against V, so every id has a slot in the maps
        if job.next_rows:
            kernels.add_next_rows(piece, row_of, out["next_rows"])
        if job.labels is not None:
            kernels.add_prefix_pairs(piece, row_of, label_index, row_of, out["prefix_counts"], out["events"])
    return out


def sum_sparse(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The sum of sparse count vectors given as (ascending keys, counts) pairs: (keys, counts) int64,
    keys ascending and distinct."""
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    keys = np.concatenate([k for k, _ in parts]).astype(np.int64)
    counts = np.concatenate([c for _, c in parts]).astype(np.int64)
    unique, where = np.unique(keys, return_inverse=True)
    total = np.zeros(unique.size, dtype=np.int64)
    np.add.at(total, where, counts)
    return unique, total

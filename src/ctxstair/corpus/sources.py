"""Tokenized pretraining shards as flat token arrays, read piece by piece (SPEC §7).

A :class:`TokenSource` is one file's tokens as a flat 1-D array (a Megatron dataset's ``.bin`` in
pointer order, a Parquet column's lists one after another), read as ranges without loading the
file, plus its document boundaries where the format records them. :func:`open_source` chooses the
reader from the file's name:

* ``.npy`` -> ``npy`` (:class:`ctxstair.corpus.flat.NpySource`);
* ``.idx``, a ``.bin`` with an ``.idx`` beside it, or the prefix of such a pair -> ``megatron``
  (:class:`ctxstair.corpus.megatron.MegatronSource`);
* any other ``.bin`` -> ``flat`` (:class:`ctxstair.corpus.flat.FlatSource`, uint16 unless told);
* ``.parquet`` -> ``parquet`` and ``.arrow``/``.feather`` -> ``arrow``
  (:mod:`ctxstair.corpus.parquet`).

Windows (:func:`windows`), the documented rule: a window is a run of ``window`` consecutive tokens,
and windows do not overlap, as in :func:`ctxstair.text.windows.make_windows`.

* ``documents="joined"`` (the default): each file is one stream, its documents concatenated in
  order, as nanoGPT's ``train.bin`` and Megatron's GPT dataset read them. Window ``i`` is tokens
  ``[i * window, (i + 1) * window)`` of the file; it may cross a document boundary but never a file
  boundary (each file is windowed on its own), and the file's last ``n_tokens % window`` tokens
  are dropped.
* ``documents="separate"``: each document is cut on its own, its last ``length % window`` tokens
  dropped, so no window crosses a document boundary; the windows of document ``d`` follow those of
  document ``d - 1``. Only for formats that record boundaries (Megatron, Parquet and Arrow list
  columns); a flat ``.bin`` or ``.npy`` is refused.

Window ``i`` is always the same tokens, however the windows are later split into work units, and
reading windows ``[i0, i1)`` takes memory for those windows only (plus, for Parquet and Arrow, the
row groups or record batches they lie in).

The readers import lazily: this module loads without pyarrow, which only Parquet and Arrow files
need (``pip install 'ctxstair[parquet]'``).
"""

from __future__ import annotations

import abc
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ctxstair.errors import InputError

KINDS = ("flat", "npy", "megatron", "parquet", "arrow")
#: The suffixes a directory is searched for (:func:`open_sources`).
SHARD_SUFFIXES = (".bin", ".idx", ".npy", ".parquet", ".arrow", ".feather")
_TABLE_SUFFIXES = {".parquet": "parquet", ".arrow": "arrow", ".feather": "arrow"}
_READER_METHODS = ("read", "document_lengths", "files", "describe")


class TokenSource(abc.ABC):
    """One file's tokens as a flat array, read in ranges.

    The readers of :mod:`ctxstair.corpus.flat`, :mod:`~ctxstair.corpus.megatron` and
    :mod:`~ctxstair.corpus.parquet` satisfy this interface without inheriting from it (they are
    imported lazily by :func:`open_source`, so that no import cycle ties them to this module);
    ``isinstance(x, TokenSource)`` holds for any object with the four methods below.

    Attributes:
        path: the file (for Megatron, the ``.bin`` of the pair).
        kind: one of :data:`KINDS`.
        dtype: the stored token dtype.
        n_tokens: tokens in the file's flat token array.
    """

    path: Path
    kind: str
    dtype: np.dtype
    n_tokens: int

    @classmethod
    def __subclasshook__(cls, other):
        if cls is TokenSource and all(any(name in base.__dict__ for base in other.__mro__)
                                      for name in _READER_METHODS):
            return True
        return NotImplemented

    @abc.abstractmethod
    def read(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the flat array: 1-D (stop - start,), the stored dtype, in this
        process's memory (never a view that would keep the file's pages resident)."""

    @abc.abstractmethod
    def document_lengths(self) -> np.ndarray | None:
        """int64 (D,): tokens per document, in order, summing to ``n_tokens``; None when the format
        records no document boundaries (flat ``.bin``, ``.npy``, a plain integer column)."""

    @abc.abstractmethod
    def files(self) -> list[Path]:
        """Every file this source reads (the ``.bin`` and ``.idx`` of a Megatron pair)."""

    @abc.abstractmethod
    def describe(self) -> dict:
        """JSON-ready summary: kind, path (the file's name), dtype, n_tokens, documents (count or
        None) and, for Parquet and Arrow, column."""


def open_source(path: str | os.PathLike, *, kind: str | None = None, dtype: str | None = None,
                column: str | None = None, text_ok: bool = False) -> TokenSource:
    """The reader of one tokenized file (see the module's table for how ``kind`` is inferred).

    Args:
        path: the file; for Megatron, the ``.bin``, the ``.idx`` or the prefix they share.
        kind: one of :data:`KINDS`, to override the inference.
        dtype: the token dtype of a flat ``.bin`` (uint16, the default, uint32, int32 or int64).
            The other formats record their own; a dtype given for them must be the stored one.
        column: the token column of a Parquet or Arrow file (default: ``input_ids``, else
            ``tokens``, else the only list-of-integer column); refused for other formats.
        text_ok: accept a flat ``.bin`` whose first bytes read as text, which is refused otherwise
            (:func:`ctxstair.corpus.flat.refuse_text`); the other formats have headers.
    """
    path = Path(path)
    kind = _kind(path) if kind is None else kind
    if kind not in KINDS:
        raise InputError(f"{path}: unknown corpus file kind {kind!r}; use one of {', '.join(KINDS)}")
    if column is not None and kind not in ("parquet", "arrow"):
        raise InputError(f"{path}: column={column!r} applies to Parquet and Arrow files, not to a {kind} file")
    if kind == "flat":
        from ctxstair.corpus.flat import FlatSource
        return FlatSource(path, "uint16" if dtype is None else dtype, text_ok=text_ok)
    if kind == "npy":
        from ctxstair.corpus.flat import NpySource
        source = NpySource(path)
    elif kind == "megatron":
        from ctxstair.corpus.megatron import MegatronSource
        source = MegatronSource(path)
    else:
        source = _table_module(path, kind).open_table(path, kind, column)
    if dtype is not None and _dtype(dtype, path) != source.dtype:
        raise InputError(f"{path}: the file stores {source.dtype.name} tokens, not the {dtype} asked for")
    return source


def open_sources(paths: str | os.PathLike | Iterable[str | os.PathLike], **options) -> list[TokenSource]:
    """Readers of several files, in the order given; a directory stands for its shard files (those
    with a suffix of :data:`SHARD_SUFFIXES`, not its subdirectories) in sorted order, one source per
    Megatron ``.bin``/``.idx`` pair. ``options`` are those of :func:`open_source`."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    sources = []
    for path in map(Path, paths):
        for file in _shard_files(path) if path.is_dir() else [path]:
            sources.append(open_source(file, **options))
    return sources


def windows(source: TokenSource, window: int, documents: str = "joined") -> WindowIndex:
    """The non-overlapping windows of ``window`` tokens of one file (the rule is in the module's
    docstring): ``documents="joined"`` cuts the file's stream, ``"separate"`` each document."""
    return WindowIndex(source, window, documents)


class WindowIndex:
    """Windows of one source, numbered ``0 .. n_windows - 1`` (the module's rule).

    Attributes:
        source: the file.
        window: tokens per window.
        documents: ``"joined"`` or ``"separate"``.
        n_windows: how many windows the file has.
    """

    def __init__(self, source: TokenSource, window: int, documents: str = "joined"):
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
            raise InputError(f"window must be a positive number of tokens, not {window!r}")
        if documents not in ("joined", "separate"):
            raise InputError(f"documents must be 'joined' or 'separate', not {documents!r}")
        self.source, self.window, self.documents = source, int(window), documents
        if documents == "joined":
            self._first = None
            self.n_windows = int(source.n_tokens) // self.window
            return
        lengths = source.document_lengths()
        if lengths is None:
            raise InputError(f"{source.path}: documents='separate' needs document boundaries, which a {source.kind} "
                             "file does not record; use documents='joined'")
        lengths = np.asarray(lengths, dtype=np.int64)
        # Window i lies in the document d with first[d] <= i < first[d + 1], at offset[d] + (i - first[d]) * window.
        self._first = np.concatenate([[0], np.cumsum(lengths // self.window)])
        self._offset = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if lengths.size else np.zeros(0, np.int64)
        self.n_windows = int(self._first[-1])

    def starts(self, i0: int, i1: int) -> np.ndarray:
        """int64 (i1 - i0,): the offset in the flat token array of windows ``i0 .. i1 - 1``."""
        self._check(i0, i1)
        return self._starts_of(np.arange(i0, i1, dtype=np.int64))

    def take(self, numbers: np.ndarray) -> np.ndarray:
        """int64 (b, window): the windows numbered ``numbers`` (int (b,), in any order, repeats
        allowed), one read of the source each: a training batch drawn at random."""
        numbers = np.asarray(numbers, dtype=np.int64)
        if numbers.size and not (numbers.min() >= 0 and numbers.max() < self.n_windows):
            raise InputError(f"{self.source.path}: window numbers outside [0, {self.n_windows})")
        out = np.empty((numbers.size, self.window), dtype=np.int64)
        for row, start in enumerate(self._starts_of(numbers).tolist()):
            out[row] = self.source.read(start, start + self.window)
        return out

    def _starts_of(self, index: np.ndarray) -> np.ndarray:
        """int64 (b,): the offset in the flat token array of the windows numbered ``index`` (b,)."""
        if self._first is None:
            return index * self.window
        document = np.searchsorted(self._first, index, side="right") - 1
        return self._offset[document] + (index - self._first[document]) * self.window

    def read(self, i0: int, i1: int, dtype=np.int64) -> np.ndarray:
        """(i1 - i0, window): the tokens of windows ``i0 .. i1 - 1`` as ``dtype``; ``None`` keeps the
        stored dtype, and windows that follow each other in the file (always, when joined) are then
        the reader's own array, reshaped without a copy."""
        starts = self.starts(i0, i1)
        dtype = self.source.dtype if dtype is None else np.dtype(dtype)
        # One read per run of windows that follow each other in the file (one run when joined).
        cuts = np.flatnonzero(np.diff(starts) != self.window) + 1
        runs = [(int(a), int(b)) for a, b in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [len(starts)]]))
                if b > a]
        if len(runs) == 1 and dtype == self.source.dtype:
            start = int(starts[0])
            return self.source.read(start, start + len(starts) * self.window).reshape(-1, self.window)
        out = np.empty((len(starts), self.window), dtype=dtype)
        for a, b in runs:
            start = int(starts[a])
            out[a:b] = self.source.read(start, start + (b - a) * self.window).reshape(-1, self.window)
        return out

    def _check(self, i0: int, i1: int) -> None:
        if not 0 <= i0 <= i1 <= self.n_windows:
            raise InputError(f"{self.source.path}: windows [{i0}, {i1}) are outside [0, {self.n_windows})")


def _kind(path: Path) -> str:
    if _megatron_pair(path):
        return "megatron"
    if path.is_dir():
        raise InputError(f"{path} is a directory; open its shards with open_sources")
    if not path.exists():
        raise InputError(f"{path}: no such file (nor a Megatron prefix with .bin and .idx)")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return "npy"
    if suffix == ".bin":
        return "flat"
    if suffix in _TABLE_SUFFIXES:
        return _TABLE_SUFFIXES[suffix]
    raise InputError(f"{path}: cannot tell the format from the suffix {path.suffix!r}; "
                     f"expected one of {', '.join(SHARD_SUFFIXES)} (or pass kind=)")


def _dtype(dtype, path: Path) -> np.dtype:
    try:
        return np.dtype(dtype)
    except TypeError:
        raise InputError(f"{path}: {dtype!r} is not a numpy dtype") from None


def _megatron_pair(path: Path) -> bool:
    """Whether ``path`` names a Megatron dataset: its ``.idx``, a ``.bin`` with an ``.idx`` beside it,
    or the prefix of an existing ``.bin``/``.idx`` pair."""
    suffix = path.suffix.lower()
    if suffix == ".idx":
        return True
    if suffix == ".bin" and path.with_suffix(".idx").is_file():
        return True
    return not path.exists() and Path(f"{path}.bin").is_file() and Path(f"{path}.idx").is_file()


def _shard_files(folder: Path) -> list[Path]:
    files = []
    for file in sorted(folder.iterdir()):
        if file.name.startswith(".") or not file.is_file() or file.suffix.lower() not in SHARD_SUFFIXES:
            continue
        if file.suffix.lower() == ".idx" and file.with_suffix(".bin").is_file():
            continue  # opened through its .bin
        files.append(file)
    if not files:
        raise InputError(f"{folder}: no shard files ({', '.join(SHARD_SUFFIXES)})")
    return files


def _table_module(path: Path, kind: str):
    try:
        from ctxstair.corpus import parquet
    except ModuleNotFoundError as error:
        if (error.name or "").split(".")[0] != "pyarrow":
            raise
        raise InputError(f"{path}: reading {kind} files needs pyarrow: pip install 'ctxstair[parquet]'") from None
    return parquet

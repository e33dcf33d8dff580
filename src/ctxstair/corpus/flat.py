"""Flat token files: a raw ``.bin`` of one integer dtype (nanoGPT's ``train.bin``) and a 1-D ``.npy``.

Both are memory-mapped to learn their length and dtype, never loaded; a range of tokens is read
with one read of those bytes (:meth:`MappedSource._read`). Neither records document boundaries.
:class:`MappedSource` is what every reader of :mod:`ctxstair.corpus` shares (range checks, reads,
:meth:`describe`); the interface itself is :class:`ctxstair.corpus.sources.TokenSource`.
"""

from __future__ import annotations

import codecs
import os
import weakref
from pathlib import Path

import numpy as np

from ctxstair.errors import InputError

#: The token dtypes a raw ``.bin`` may be read as; raw files are little-endian, as written on x86 and ARM.
FLAT_DTYPES = ("uint16", "uint32", "int32", "int64")
_NPY_MAGIC = b"\x93NUMPY"


class MappedSource:
    """What the readers share. Subclasses set ``path``, ``kind``, ``dtype``, ``n_tokens`` and the
    file's map ``_tokens``, or implement :meth:`_read` for a checked range themselves."""

    path: Path
    kind: str
    dtype: np.dtype
    n_tokens: int

    def read(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` of the flat array: 1-D (stop - start,), the stored dtype."""
        if not 0 <= start <= stop <= self.n_tokens:
            raise InputError(f"{self.path}: tokens [{start}, {stop}) are outside [0, {self.n_tokens})")
        return self._read(int(start), int(stop))

    def _read(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` read into this process's memory, not a view of the map: the
        pages of a mapped file that have been read stay resident in the process until the map is
        closed, so a worker that counted 10 GB of a file through its map would hold 10 GB. Where
        the platform has positioned reads, the bytes go straight into the array through a
        descriptor this process keeps open (a training batch is one read per window: opening the
        file for each cost 15 µs of a 20 µs read)."""
        tokens = self._tokens
        if not isinstance(tokens, np.memmap):  # an empty file has no map
            return tokens[start:stop]
        offset = tokens.offset + start * self.dtype.itemsize
        if not hasattr(os, "preadv"):
            return np.fromfile(tokens.filename, dtype=self.dtype, count=stop - start, offset=offset)
        out = np.empty(stop - start, dtype=self.dtype)
        view, done = memoryview(out).cast("B"), 0
        while done < len(view):  # one call unless the range is larger than the kernel reads at once
            got = os.preadv(self._descriptor(), [view[done:]], offset + done)
            if got == 0:
                raise InputError(f"{self.path}: the file ended at byte {offset + done}: was it cut while being read?")
            done += got
        return out

    def _descriptor(self) -> int:
        """A read-only descriptor of the mapped file, opened once per process (a forked worker opens
        its own) and closed when the source is collected."""
        pid = os.getpid()
        if self.__dict__.get("_opened", (None,))[0] != pid:
            descriptor = os.open(self._tokens.filename, os.O_RDONLY)
            weakref.finalize(self, os.close, descriptor)
            self._opened = (pid, descriptor)
        return self._opened[1]

    def document_lengths(self) -> np.ndarray | None:
        """int64 (D,) tokens per document, or None: this format records no document boundaries."""
        return None

    def files(self) -> list[Path]:
        """The files read: this one."""
        return [self.path]

    def describe(self) -> dict:
        """JSON-ready: kind, path (the file's name), dtype, n_tokens, documents (count or None)."""
        lengths = self.document_lengths()
        return {"kind": self.kind, "path": self.path.name, "dtype": self.dtype.name, "n_tokens": int(self.n_tokens),
                "documents": None if lengths is None else len(lengths)}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.path)!r}, {self.dtype.name}, n_tokens={self.n_tokens})"


class FlatSource(MappedSource):
    """A raw ``.bin`` of tokens of one dtype (one of :data:`FLAT_DTYPES`), no header."""

    kind = "flat"

    def __init__(self, path: str | os.PathLike, dtype: str | np.dtype = "uint16", text_ok: bool = False):
        """``text_ok``: accept a file whose first bytes read as text (:func:`refuse_text`)."""
        self.path = Path(path)
        self.dtype = flat_dtype(dtype, self.path)
        self._tokens = map_tokens(self.path, self.dtype)
        self.n_tokens = len(self._tokens)
        if not text_ok:
            refuse_text(self.path, self.dtype)


#: How much of a headerless token file is looked at for text.
TEXT_SAMPLE_BYTES = 1 << 20


def refuse_text(path: Path, dtype: np.dtype) -> None:
    """InputError when the first :data:`TEXT_SAMPLE_BYTES` of a headerless token file are printable
    UTF-8 text throughout: a text file given where token ids were meant. Real token ids almost never
    read so (a uint16 id below 256 has a zero byte; every byte printable needs every id in narrow
    ranges), so the rare file that does is accepted only when asked for (``text_ok``)."""
    with open(path, "rb") as handle:
        sample = handle.read(TEXT_SAMPLE_BYTES)
    if not sample:
        return
    try:  # a character cut at the sample's end is left out, not an error
        text = codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
    except UnicodeDecodeError:
        return
    if text.translate(_WHITESPACE).isprintable():
        raise InputError(f"{path}: its first {len(sample):,} bytes read as text ({text[:40]!r}…), not {dtype.name} "
                         "token ids: tokenize text first (ctxstair corpus tokenize), or accept the file as "
                         "tokens with --text-ok (text_ok=True)")


_WHITESPACE = {ord(c): None for c in "\t\n\r"}


class NpySource(MappedSource):
    """A ``.npy`` holding one 1-D integer array."""

    kind = "npy"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        _check_file(self.path)
        with open(self.path, "rb") as handle:
            if handle.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                raise InputError(f"{self.path}: not a .npy file (no NumPy header)")
        try:
            tokens = np.load(self.path, mmap_mode="r", allow_pickle=False)
        except ValueError as error:  # object arrays, bad headers
            raise InputError(f"{self.path}: cannot map the array: {str(error).splitlines()[0]}") from None
        if tokens.ndim != 1:
            raise InputError(f"{self.path}: the array has shape {tokens.shape}; a token file must be 1-D")
        if not np.issubdtype(tokens.dtype, np.integer):
            raise InputError(f"{self.path}: the array has dtype {tokens.dtype}; token ids must be integers")
        self._tokens, self.dtype, self.n_tokens = tokens, tokens.dtype, len(tokens)


def flat_dtype(dtype: str | np.dtype, path: Path) -> np.dtype:
    """The little-endian numpy dtype of one of :data:`FLAT_DTYPES`, or InputError naming ``path``."""
    name = np.dtype(dtype).name if isinstance(dtype, np.dtype) else str(dtype)
    if name not in FLAT_DTYPES:
        raise InputError(f"{path}: token dtype {name!r} is not one of {', '.join(FLAT_DTYPES)}")
    return np.dtype(name).newbyteorder("<")


def map_tokens(path: Path, dtype: np.dtype) -> np.ndarray:
    """The whole file as a read-only memmap (n,) of ``dtype``; a size that is not a whole number of
    tokens is refused as truncated."""
    size = _check_file(path)
    if size % dtype.itemsize:
        raise InputError(f"{path}: truncated: {size} bytes is not a whole number of {dtype.name} tokens "
                         f"({dtype.itemsize} bytes each)")
    if size == 0:  # mmap refuses empty files
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def _check_file(path: Path) -> int:
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    return path.stat().st_size

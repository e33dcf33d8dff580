"""Megatron-LM / GPT-NeoX indexed datasets: a ``.bin`` of tokens and the ``.idx`` that cuts it.

The ``.idx`` layout (all little-endian)::

    9 bytes   magic b"MMIDIDX\\x00\\x00"
    uint64    version, 1
    uint8     token dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16
              (6 and 7 are floating-point types, refused here)
    uint64    S, the number of sequences
    uint64    C, the number of document-index entries (documents + 1)
    int32[S]  tokens in each sequence
    int64[S]  byte offset of each sequence in the .bin
    int64[C]  document index: document d is sequences [index[d], index[d + 1]); 0 first, S last
    (int8[S]  one mode per sequence, in multimodal datasets only; not read)

The header's second count is that of the document index, one more than the number of documents.
Sequences are read in pointer order, so the flat token array is the ``.bin`` itself; this reader
accepts only datasets whose sequences follow one another from byte 0 and fill the ``.bin`` (what
Megatron's and GPT-NeoX's preprocessing scripts write), and refuses any other with one line.
"""

from __future__ import annotations

import os
import secrets
import struct
from array import array
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ctxstair.corpus.flat import MappedSource, map_tokens
from ctxstair.errors import InputError
from ctxstair.io import atomic_write_bytes

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
#: Token dtype codes of the format; the integer ones only.
DTYPE_CODES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 8: "uint16"}
_CODE_OF = {name: code for code, name in DTYPE_CODES.items()}
_FLOAT_CODES = (6, 7)
_HEADER = struct.Struct("<9sQBQQ")


def pair_paths(prefix: str | os.PathLike) -> tuple[Path, Path]:
    """(``.bin``, ``.idx``) of a dataset given by its prefix or by either of its two files."""
    prefix = Path(prefix)
    if prefix.suffix.lower() in (".bin", ".idx"):
        prefix = prefix.with_suffix("")
    return Path(f"{prefix}.bin"), Path(f"{prefix}.idx")


class MegatronSource(MappedSource):
    """A Megatron indexed dataset: the ``.bin`` memory-mapped as the flat token array, the ``.idx``
    giving its documents. ``path`` is the ``.bin``; ``idx_path`` the ``.idx``."""

    kind = "megatron"

    def __init__(self, prefix: str | os.PathLike):
        self.path, self.idx_path = pair_paths(prefix)
        for file in (self.idx_path, self.path):
            if not file.is_file():
                raise InputError(f"{file}: no such file (a Megatron dataset needs both the .bin and the .idx)")
        self.dtype, self._sequence_lengths, pointers, self._document_index = _read_index(self.idx_path)
        self.n_tokens = int(self._sequence_lengths.sum(dtype=np.int64))
        self._check_layout(pointers)
        self._tokens = map_tokens(self.path, self.dtype)

    def document_lengths(self) -> np.ndarray:
        """int64 (D,): tokens per document (the sum of its sequences' lengths)."""
        ends = np.concatenate([[0], np.cumsum(self._sequence_lengths, dtype=np.int64)])
        return np.diff(ends[self._document_index])

    def files(self) -> list[Path]:
        """The ``.bin`` and the ``.idx``."""
        return [self.path, self.idx_path]

    def _check_layout(self, pointers: np.ndarray) -> None:
        """Refuse an index whose sequences do not tile the ``.bin`` in order, or whose document index
        does not run from sequence 0 to the last."""
        idx, lengths, documents = self.idx_path, self._sequence_lengths, self._document_index
        if lengths.size and lengths.min() < 0:
            raise InputError(f"{idx}: negative sequence length {int(lengths.min())}")
        if documents.size == 0 or documents[0] != 0 or documents[-1] != lengths.size or np.any(np.diff(documents) < 0):
            raise InputError(f"{idx}: the document index must rise from 0 to the number of sequences ({lengths.size})")
        ends = np.cumsum(lengths, dtype=np.int64) * self.dtype.itemsize
        if pointers.size and (pointers[0] != 0 or np.any(pointers[1:] != ends[:-1])):
            raise InputError(f"{idx}: the sequences are not stored one after another from the .bin's start; "
                             "only contiguous datasets are read")
        size, needed = self.path.stat().st_size, self.n_tokens * self.dtype.itemsize
        if size < needed:
            raise InputError(f"{self.path}: truncated .bin: {size} bytes, the .idx describes {needed}")
        if size > needed:
            raise InputError(f"{self.path}: {size} bytes, more than the {needed} its .idx describes")


def _read_index(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(dtype, sequence lengths int32 (S,), pointers int64 (S,), document index int64 (C,)) of an
    ``.idx``, the arrays memory-mapped."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(_HEADER.size)
    if not MAGIC.startswith(head[: len(MAGIC)]):
        raise InputError(f"{path}: not a Megatron index (bad magic {head[:len(MAGIC)]!r}, expected {MAGIC!r})")
    if len(head) < _HEADER.size:
        raise InputError(f"{path}: truncated .idx: {size} bytes, shorter than the {_HEADER.size}-byte header")
    _, version, code, n_sequences, n_entries = _HEADER.unpack(head)
    if version != VERSION:
        raise InputError(f"{path}: Megatron index version {version}; only version {VERSION} is read")
    if code not in DTYPE_CODES:
        what = "a floating-point type" if code in _FLOAT_CODES else "unknown"
        raise InputError(f"{path}: token dtype code {code} is {what}; token ids must be integers "
                         f"(codes {', '.join(map(str, DTYPE_CODES))})")
    expected = _HEADER.size + 12 * n_sequences + 8 * n_entries
    if size < expected:
        raise InputError(f"{path}: truncated .idx: {size} bytes, its header ({n_sequences} sequences, "
                         f"{n_entries} document-index entries) needs {expected}")
    if size not in (expected, expected + n_sequences):  # the extra S bytes: a multimodal dataset's modes
        raise InputError(f"{path}: {size - expected} bytes after the document index, which the header does not "
                         "account for")
    index = np.memmap(path, dtype=np.uint8, mode="r")
    lengths = np.frombuffer(index, dtype="<i4", count=n_sequences, offset=_HEADER.size)
    pointers = np.frombuffer(index, dtype="<i8", count=n_sequences, offset=_HEADER.size + 4 * n_sequences)
    documents = np.frombuffer(index, dtype="<i8", count=n_entries, offset=_HEADER.size + 12 * n_sequences)
    return np.dtype(DTYPE_CODES[code]).newbyteorder("<"), lengths, pointers, documents


class IndexedWriter:
    """Writes documents, one sequence each, as a Megatron indexed dataset ``prefix.bin``/``.idx``.

    Nothing appears under the final names before :meth:`commit`: the ``.bin`` grows under a
    temporary name (``.<name>.<random>.tmp``, what :func:`ctxstair.io.remove_stale_temporaries`
    clears) and is renamed, then the ``.idx`` is written atomically. A reader never sees the new
    ``.idx`` without its ``.bin``. Use as a context manager: an error discards everything.

    Args:
        prefix: the dataset's prefix (or the name of either file).
        dtype: the token dtype (a name of :data:`DTYPE_CODES`); None: the narrowest of uint16 and
            int32 that holds the ids, decided at :meth:`commit` (tokens are staged as int32).
    """

    def __init__(self, prefix: str | os.PathLike, dtype: str | np.dtype | None = None):
        self.bin_path, self.idx_path = pair_paths(prefix)
        self.dtype = None if dtype is None else _index_dtype(dtype, self.bin_path)
        self._staged = self.dtype or np.dtype("<i4")
        self._lengths = array("q")
        self._largest = -1
        self._tmp = _temporary(self.bin_path)
        self._file = open(self._tmp, "xb")  # noqa: SIM115 -- kept open across add_document calls

    def add_document(self, tokens) -> None:
        """Append one document: 1-D (n,) integer token ids, non-negative and within the dtype."""
        ids = np.asarray(tokens)
        self.add_documents(ids, [ids.size] if ids.ndim == 1 else [])

    def add_documents(self, tokens, lengths) -> None:
        """Append several documents at once: their ids concatenated, 1-D (n,), and their lengths
        (documents,), summing to n."""
        ids, lengths = np.asarray(tokens), np.asarray(lengths, dtype=np.int64)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise InputError(f"{self.bin_path}: documents must be 1-D arrays of integer token ids, not "
                             f"{ids.dtype} of shape {ids.shape}")
        if lengths.ndim != 1 or lengths.sum() != ids.size or (lengths.size and lengths.min() < 0):
            raise InputError(f"{self.bin_path}: document lengths {lengths.tolist()[:8]} do not cut {ids.size} tokens")
        if lengths.size and lengths.max() > np.iinfo(np.int32).max:
            raise InputError(f"{self.bin_path}: a document of {lengths.max()} tokens exceeds a sequence's int32 length")
        if ids.size:
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high > np.iinfo(self._staged).max:
                raise InputError(f"{self.bin_path}: token ids {low}..{high} do not fit {self._staged.name}")
            self._largest = max(self._largest, high)
        self._file.write(ids.astype(self._staged, copy=False).tobytes())
        self._lengths.extend(lengths.tolist())

    def commit(self) -> tuple[Path, Path]:
        """Finish: rename the ``.bin`` into place and write the ``.idx``; returns (bin, idx)."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        if self.dtype is None:
            self.dtype = np.dtype("<u2") if self._largest < 1 << 16 else self._staged
            if self.dtype != self._staged:
                self._narrow()
        os.replace(self._tmp, self.bin_path)
        atomic_write_bytes(self.idx_path, index_bytes(np.array(self._lengths, dtype=np.int64), self.dtype))
        return self.bin_path, self.idx_path

    def abort(self) -> None:
        """Discard what was written."""
        self._file.close()
        self._tmp.unlink(missing_ok=True)

    def _narrow(self) -> None:
        """Rewrite the staged int32 tokens as ``self.dtype``, a block at a time."""
        narrow = _temporary(self.bin_path)
        try:
            with open(narrow, "xb") as out:
                staged = map_tokens(self._tmp, self._staged)
                for start in range(0, len(staged), 1 << 22):
                    out.write(staged[start:start + (1 << 22)].astype(self.dtype).tobytes())
                out.flush()
                os.fsync(out.fileno())
            del staged
            os.replace(narrow, self._tmp)
        except BaseException:
            narrow.unlink(missing_ok=True)
            raise

    def __enter__(self) -> IndexedWriter:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()


def write_indexed(prefix: str | os.PathLike, documents: Sequence[np.ndarray],
                  dtype: str | np.dtype = "uint16") -> tuple[Path, Path]:
    """Write ``documents`` (each 1-D (n_d,) integer token ids, one sequence per document; empty ones
    allowed) as ``prefix.bin`` and ``prefix.idx``; returns their paths."""
    with IndexedWriter(prefix, dtype) as writer:
        for document in documents:
            writer.add_document(document)
    return writer.bin_path, writer.idx_path


def index_bytes(lengths: np.ndarray, dtype: str | np.dtype) -> bytes:
    """The ``.idx`` of documents of one sequence each, of ``lengths`` (D,) tokens, stored as ``dtype``."""
    dtype = np.dtype(dtype)
    lengths = np.asarray(lengths, dtype=np.int64)
    pointers = np.zeros(lengths.size, dtype="<i8")
    pointers[1:] = np.cumsum(lengths[:-1]) * dtype.itemsize
    header = _HEADER.pack(MAGIC, VERSION, _CODE_OF[dtype.name], lengths.size, lengths.size + 1)
    return b"".join([header, lengths.astype("<i4").tobytes(), pointers.tobytes(),
                     np.arange(lengths.size + 1, dtype="<i8").tobytes()])


def _index_dtype(dtype: str | np.dtype, path: Path) -> np.dtype:
    name = np.dtype(dtype).name
    if name not in _CODE_OF:
        raise InputError(f"{path}: token dtype {name!r} cannot be stored; use one of {', '.join(_CODE_OF)}")
    return np.dtype(name).newbyteorder("<")


def _temporary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"

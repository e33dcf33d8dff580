"""Token ids in a column of a Parquet file or an Arrow IPC file (what Hugging Face ``datasets`` caches).

The column is either a list of integers per row, one document per row (``input_ids``, the
``datasets`` layout), or a plain integer column, one token per row and no document boundaries.
The flat token array is the column's values row after row.

Files are read a row group (Parquet) or record batch (Arrow) at a time: opening reads only the
token column, once, to learn each chunk's token count and each row's length; :meth:`read` then
reads the chunks a range overlaps. Arrow files are memory-mapped, in the IPC file format or the
stream format (which ``datasets`` writes).

Needs pyarrow (``pip install 'ctxstair[parquet]'``); :mod:`ctxstair.corpus.sources` imports this
module only when a Parquet or Arrow file is opened.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc
import pyarrow.parquet as pq

from ctxstair.corpus.flat import MappedSource
from ctxstair.errors import InputError

#: Column names tried, in order, when none is given.
DEFAULT_COLUMNS = ("input_ids", "tokens")


def open_table(path: str | os.PathLike, kind: str, column: str | None = None) -> ColumnSource:
    """The reader of a ``kind`` ("parquet" or "arrow") file's token ``column``."""
    return (ParquetSource if kind == "parquet" else ArrowSource)(path, column)


class ColumnSource(MappedSource):
    """A token column read chunk by chunk; subclasses give the chunks (:meth:`_chunk`)."""

    def __init__(self, path: Path, schema: pa.Schema, n_chunks: int, column: str | None):
        self.path = path
        self.column = _choose_column(path, schema, column)
        kind = schema.field(self.column).type
        self._lists = _is_list(kind)
        value = kind.value_type if self._lists else kind
        if not pa.types.is_integer(value):
            raise InputError(f"{path}: column {self.column!r} has type {kind}; token ids must be integers")
        self.dtype = np.dtype(value.to_pandas_dtype())
        self._n_chunks = n_chunks
        counts, lengths = [], []
        for i in range(n_chunks):  # one pass over the column: chunk sizes and row lengths
            tokens, rows = self._load(i)
            counts.append(len(tokens))
            if rows is not None:
                lengths.append(rows)
        self._offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        self.n_tokens = int(self._offsets[-1])
        self._lengths = None
        if self._lists:
            self._lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        self._cached: tuple[int, np.ndarray] | None = None

    def _chunk(self, i: int) -> pa.Array | pa.ChunkedArray:
        raise NotImplementedError

    def _load(self, i: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(tokens of chunk ``i``, 1-D stored dtype; its rows' lengths int64 (rows,), None for a plain column)."""
        data = self._chunk(i)
        if isinstance(data, pa.ChunkedArray):  # a row group's column may come in pieces
            data = data.combine_chunks()
        if data.null_count:
            raise InputError(f"{self.path}: column {self.column!r} has {data.null_count} null rows; "
                             "every row must hold token ids")
        if not self._lists:
            return data.to_numpy(), None
        values = data.flatten()  # honours the array's offset, where .values would not
        if values.null_count:
            raise InputError(f"{self.path}: column {self.column!r} has null token ids inside its lists")
        return values.to_numpy(), pc.list_value_length(data).to_numpy().astype(np.int64)

    def _tokens(self, i: int) -> np.ndarray:
        # Consecutive reads mostly fall in the same chunk: keep the last one.
        if self._cached is None or self._cached[0] != i:
            self._cached = (i, self._load(i)[0])
        return self._cached[1]

    def _read(self, start: int, stop: int) -> np.ndarray:
        if start == stop:
            return np.zeros(0, dtype=self.dtype)
        first = int(np.searchsorted(self._offsets, start, side="right")) - 1
        last = int(np.searchsorted(self._offsets, stop, side="left"))
        parts = [self._tokens(i)[max(start - self._offsets[i], 0): stop - self._offsets[i]]
                 for i in range(first, last)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def document_lengths(self) -> np.ndarray | None:
        """int64 (rows,): tokens per row of a list column; None for a plain integer column."""
        return None if self._lengths is None else self._lengths.copy()

    def describe(self) -> dict:
        """JSON-ready: kind, path, dtype, n_tokens, documents (rows of a list column, else None), column."""
        return {**super().describe(), "column": self.column}


class ParquetSource(ColumnSource):
    """A token column of a Parquet file, read a row group at a time."""

    kind = "parquet"

    def __init__(self, path: str | os.PathLike, column: str | None = None):
        path = _existing(path)
        try:
            self._file = pq.ParquetFile(path, memory_map=True)
        except (pa.ArrowException, OSError) as error:
            raise InputError(f"{path}: not a readable Parquet file: {str(error).splitlines()[0]}") from None
        super().__init__(path, self._file.schema_arrow, self._file.num_row_groups, column)

    def _chunk(self, i: int) -> pa.ChunkedArray:
        return self._file.read_row_group(i, columns=[self.column]).column(0)


class ArrowSource(ColumnSource):
    """A token column of an Arrow IPC file (file or stream format), memory-mapped, read a record
    batch at a time."""

    kind = "arrow"

    def __init__(self, path: str | os.PathLike, column: str | None = None):
        path = _existing(path)
        mapped = pa.memory_map(str(path), "r")
        try:
            reader = pa.ipc.open_file(mapped)
            self._batch, n_chunks, schema = reader.get_batch, reader.num_record_batches, reader.schema
        except pa.ArrowInvalid:
            mapped.seek(0)
            try:
                stream = pa.ipc.open_stream(mapped)
                # The batches' buffers are views of the mapped file: holding them costs no memory.
                batches = list(stream)
            except pa.ArrowInvalid as error:
                raise InputError(f"{path}: not an Arrow IPC file or stream: {str(error).splitlines()[0]}") from None
            self._batch, n_chunks, schema = batches.__getitem__, len(batches), stream.schema
        super().__init__(path, schema, n_chunks, column)

    def _chunk(self, i: int) -> pa.Array:
        return self._batch(i).column(self.column)


def _choose_column(path: Path, schema: pa.Schema, column: str | None) -> str:
    names = schema.names
    if column is not None:
        if column not in names:
            raise InputError(f"{path}: no column {column!r}; the columns are {', '.join(names) or '(none)'}")
        return column
    for name in DEFAULT_COLUMNS:
        if name in names:
            return name
    lists = [f.name for f in schema if _is_list(f.type) and pa.types.is_integer(f.type.value_type)]
    if len(lists) != 1:
        raise InputError(f"{path}: no token column ({' or '.join(DEFAULT_COLUMNS)}, or a single list-of-integer "
                         f"column); the columns are {', '.join(names) or '(none)'}; pass column=")
    return lists[0]


def _is_list(kind: pa.DataType) -> bool:
    return pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)


def _existing(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    return path

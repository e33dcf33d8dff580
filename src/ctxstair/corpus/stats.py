"""The statistics directory: a corpus counted once (``ctxstair corpus count``), read by every analysis.

Layout::

    DIR/manifest.json       what was counted, from what (below); written last, so its presence marks a
                            complete directory
    DIR/stats.safetensors   the counts, exact integers, and the sample of windows, stored compactly
                            (below) and read back as int64

``manifest.json`` holds ``format`` (:data:`FORMAT`) and ``version`` (:data:`VERSION`); the
``sources`` (kind, dtype, tokens, documents, and each file's name, size and SHA-256); ``tokens``
counted (inside windows) and ``windows``; ``window`` and ``documents`` (how windows were cut); the
``tokenizer`` (its vocabulary size and the SHA-256 of its vocabulary, or None) and ``vocab_size`` V;
``counted`` (which arrays exist); and ``settings`` (k, prefix_labels, attention_windows, seed, and
whether the tracked tokens were chosen or given); and ``storage``: how each array is stored.

**Storage** (version 2). Each array is stored, on its own, in the smaller of two layouts:

* ``dense``: the array itself, in the smallest integer dtype that holds its values (``uint8``,
  ``uint16``, ``uint32``, ``uint64``; signed ones for negative values), under its name;
* ``csr``: the nonzero entries over the last axis (the others flattened into rows), as
  ``NAME.csr.indptr`` (rows + 1,), ``NAME.csr.indices`` (nnz,) and ``NAME.csr.values`` (nnz,), each in
  its smallest dtype — chosen when it takes at most half the bytes of the dense layout (the prefix
  counts, (T, Y, T) and mostly zero: 321 MB as int64, 4 MB as CSR on a 3 MB corpus).

``storage`` maps each array's name to ``{"layout", "shape", "dtype"}`` (the dtype :meth:`CorpusStats.array`
returns, int64 for every count) and ``stored`` (the dtype of each part). Version 1 directories (every
array dense int64 under its name, no ``storage``) are read as they are: both give the same arrays.

The arrays of ``stats.safetensors`` (T tracked tokens, Y prefix labels, V the vocabulary):

* ``unigram`` (V,): occurrences of each id inside windows; ``next_position`` (V,): occurrences at
  positions that follow another token of the window (position >= 1);
* ``tokens`` (T,): the tracked tokens, most frequent first; ``events`` (T,): their positions with a
  next token;
* ``next_rows`` (T, V) sparse as ``next_rows.indptr`` (T+1,), ``next_rows.indices`` (nnz,),
  ``next_rows.counts`` (nnz,): how often each id follows each tracked token (CSR, columns sorted);
* ``prefix_labels`` (Y,), ``prefix_counts`` (T, Y, T): the first-order prefix counts of
  :func:`ctxstair.signatures.prefix_counts` with context T;
* ``sample`` (n, window) and ``sample_indices`` (n,): windows for the attention paths, drawn by a
  seeded permutation of all windows (:class:`ctxstair.measure.staircase.StaircaseSetup`'s rule);
* ``bigram.keys`` (K,) = ``first · V + next`` ascending and ``bigram.counts`` (K,): every pair of
  consecutive tokens of a window, when asked for;
* ``groups.block``, ``groups.row``, ``groups.next``, ``groups.counts`` (K,) and ``has_next`` (V,): the
  word-group pairs of ``ctxstair semantics`` (the manifest's ``groups``: ``block_tokens`` and the
  words with their token ids, in row order) per block of positions, and how often each id has a
  next token inside its window, when asked for.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from functools import cached_property
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save as save_safetensors

from ctxstair.errors import InputError
from ctxstair.io import atomic_write_bytes, atomic_write_text

FORMAT = "ctxstair-corpus-statistics"
#: Bumped whenever an array's meaning or the manifest changes. Version 2 stores arrays compactly
#: (``storage``); version 1 stored every array dense int64.
VERSION = 2
#: The versions this ctxstair reads; others are refused.
READABLE = (1, 2)
MANIFEST, ARRAYS = "manifest.json", "stats.safetensors"
#: The sparse layout is chosen when it takes at most this share of the dense layout's bytes.
SPARSE_SHARE = 0.5
#: What every manifest holds (:func:`ctxstair.corpus.count.count_corpus` writes them, with the format
#: and version); a manifest without one of them is damaged.
MANIFEST_KEYS = ("sources", "window", "documents", "vocab_size", "tokenizer", "tokens", "windows", "counted",
                 "settings")
#: The record ``ctxstair corpus tokenize`` writes next to a shard (``PREFIX.ctxstair.json``): the
#: identity of its tokenizer, checked when shards are counted.
RECORD_SUFFIX = ".ctxstair.json"


def write_stats(folder: str | os.PathLike, arrays: dict[str, np.ndarray], manifest: dict) -> None:
    """Write the arrays, each in its compact layout (module docstring), then the manifest with their
    ``storage`` (it marks the directory complete), each file atomically."""
    folder = Path(folder)
    stored, storage = {}, {}
    for name, array in arrays.items():
        storage[name], parts = compact(np.asarray(array))
        stored.update({name if part is None else f"{name}.csr.{part}": values for part, values in parts.items()})
    atomic_write_bytes(folder / ARRAYS, save_safetensors({name: np.ascontiguousarray(a) for name, a in stored.items()}))
    atomic_write_text(folder / MANIFEST, json.dumps({"format": FORMAT, "version": VERSION, **manifest,
                                                     "storage": storage}, indent=2) + "\n")


def smallest_dtype(values: np.ndarray) -> np.dtype:
    """The smallest integer dtype that holds every one of the integer ``values`` (unsigned unless one is
    negative); the dtype itself for other arrays."""
    if values.dtype.kind not in "iu":
        return values.dtype
    low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64) if low >= 0 else (np.int8, np.int16, np.int32, np.int64):
        if np.iinfo(dtype).min <= low and high <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return values.dtype


def csr_parts(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr, indices, values)`` of int (r, c) ``rows`` in CSR over the last axis: int64 (r+1,), int64
    (nnz,) and (nnz,) in the rows' dtype, the nonzero entries in row-major order. One pass over the
    dense counts (``flatnonzero``), where a mask, its 2-D ``nonzero`` and a masked copy took three."""
    flat = np.flatnonzero(rows).astype(np.int64, copy=False)
    row, indices = np.divmod(flat, rows.shape[1])
    indptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=rows.shape[0]))]).astype(np.int64)
    return indptr, indices, rows.reshape(-1)[flat]


def compact(array: np.ndarray) -> tuple[dict, dict[str | None, np.ndarray]]:
    """``(storage entry, parts)`` of one array: dense in its smallest dtype (part None), or CSR over its
    last axis (parts ``indptr``, ``indices``, ``values``) when that takes at most :data:`SPARSE_SHARE` of
    the dense bytes (module docstring). Exact: :func:`expand` gives ``array`` back, an integer array as
    int64 (counts summed in int32 are read as every other count)."""
    entry = {"shape": list(array.shape), "dtype": "int64" if array.dtype.kind in "iu" else array.dtype.name}
    dense_dtype = smallest_dtype(array)  # the dense copy is made only when it is the layout chosen
    if array.dtype.kind in "iu" and array.ndim >= 1 and array.size and _csr_may_fit(array, dense_dtype):
        indptr, indices, values = csr_parts(array.reshape(-1, array.shape[-1]))
        parts = {part: v.astype(smallest_dtype(v)) for part, v in zip(("indptr", "indices", "values"),
                                                                       (indptr, indices, values))}
        if sum(v.nbytes for v in parts.values()) <= SPARSE_SHARE * array.size * dense_dtype.itemsize:
            return {"layout": "csr", **entry, "stored": {part: v.dtype.name for part, v in parts.items()}}, parts
    # A nonnegative array whose unsigned dtype has its item size has the same bits in it: viewed, not copied
    # (the 160 MB of int32 prefix counts at the defaults).
    same_bits = dense_dtype.kind == "u" and dense_dtype.itemsize == array.dtype.itemsize and array.flags.c_contiguous
    values = array.view(dense_dtype) if same_bits else array.astype(dense_dtype)
    return {"layout": "dense", **entry, "stored": {"values": dense_dtype.name}}, {None: values}


def _csr_may_fit(array: np.ndarray, dense_dtype: np.dtype) -> bool:
    """Whether the CSR layout of the integer ``array`` can take at most :data:`SPARSE_SHARE` of its dense
    bytes, judged from its count of nonzero entries alone, so that a dense array's CSR is never built
    (for the (200, 1,000, 200) prefix counts, most of a count's writing time). Exact, not a heuristic:
    the CSR's values take the dense dtype (the nonzero entries hold the array's extremes, or a zero that
    any dtype holds), its indptr the dtype of the count, and its indices at least a byte each, so a
    False here means :func:`compact` would have chosen the dense layout anyway."""
    nonzero = np.count_nonzero(array)
    n_rows = array.size // array.shape[-1]
    least = nonzero * (dense_dtype.itemsize + 1) + (n_rows + 1) * smallest_dtype(np.array([nonzero])).itemsize
    return least <= SPARSE_SHARE * array.size * dense_dtype.itemsize


def expand(entry: dict, parts: dict[str | None, np.ndarray]) -> np.ndarray:
    """The array that :func:`compact` stored as ``entry`` and ``parts``; ValueError when they disagree."""
    shape, dtype = tuple(entry["shape"]), np.dtype(entry["dtype"])
    if entry["layout"] == "dense":
        values = parts[None]
        if values.shape != shape:
            raise ValueError(f"shape {values.shape}, the manifest says {shape}")
        return values.astype(dtype)
    if entry["layout"] != "csr":
        raise ValueError(f"unknown layout {entry['layout']!r}")
    indptr, indices, values = (parts[part].astype(np.int64) for part in ("indptr", "indices", "values"))
    columns = shape[-1]
    n_rows = int(np.prod(shape[:-1], dtype=np.int64))
    if indptr.shape != (n_rows + 1,) or indptr[-1] != indices.size or indices.size != values.size \
            or np.any(np.diff(indptr) < 0) or (indices.size and not 0 <= indices.min() <= indices.max() < columns):
        raise ValueError(f"its sparse parts do not describe an array of shape {shape}")
    dense = np.zeros(n_rows * columns, dtype=dtype)
    dense[np.repeat(np.arange(n_rows, dtype=np.int64) * columns, np.diff(indptr)) + indices] = values
    return dense.reshape(shape)


def tokenizer_identity(tokenizer) -> dict | None:
    """``{"vocab_size", "vocab_sha256"}`` of a tokenizer (a :class:`~ctxstair.text.tokenizer.TextTokenizer`
    or a ``tokenizers.Tokenizer``); None for None or an object without a vocabulary. Two tokenizers
    with the same map from token strings to ids give the same ids the same meaning, whatever else
    their files say."""
    backend = getattr(tokenizer, "tokenizer", tokenizer)
    if not hasattr(backend, "get_vocab"):  # None, or an encoder that names no vocabulary
        return None
    vocab = backend.get_vocab(with_added_tokens=True)
    digest = hashlib.sha256(json.dumps(sorted(vocab.items(), key=lambda item: item[1])).encode()).hexdigest()
    return {"vocab_size": len(vocab), "vocab_sha256": digest}


class CorpusStats:
    """A complete statistics directory, read lazily (arrays are loaded when first used).

    Attributes:
        path: the directory.
        manifest: ``manifest.json`` as a dict.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        file = self.path / MANIFEST
        if not file.is_file():
            if (self.path / ".units").is_dir():
                raise InputError(f"{self.path} is an unfinished count; continue it with: ctxstair corpus count "
                                 "... --out DIR --resume")
            raise InputError(f"{self.path} is not a corpus statistics directory (no {MANIFEST})")
        try:
            manifest = json.loads(file.read_text())
        except (OSError, ValueError) as error:
            raise InputError(f"{file} cannot be read: {error}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise InputError(f"{file} is not a corpus statistics manifest")
        if manifest.get("version") not in READABLE:
            raise InputError(f"{self.path} was written by statistics version {manifest.get('version')}, this "
                             f"ctxstair reads versions {', '.join(map(str, READABLE))}: count the corpus again")
        required = MANIFEST_KEYS + (("storage",) if manifest["version"] >= 2 else ())
        missing = [key for key in required if key not in manifest]
        if missing:
            raise InputError(f"{file} has no {', '.join(missing)}: the file is damaged; count the corpus again")
        self.manifest = manifest

    @property
    def vocab_size(self) -> int:
        """V: the vocabulary the ids range over."""
        return int(self.manifest["vocab_size"])

    @property
    def window(self) -> int:
        """Tokens per window."""
        return int(self.manifest["window"])

    @property
    def counted(self) -> list[str]:
        """Which statistics the directory holds (``unigram``, ``next``, ``prefix``, ``sample``, ``bigram``)."""
        return list(self.manifest["counted"])

    @cached_property
    def _names(self) -> set[str]:
        if "storage" in self.manifest:
            return set(self.manifest["storage"])
        with self._arrays() as handle:  # version 1: every array under its name
            return set(handle.keys())

    def array(self, name: str) -> np.ndarray:
        """One array of ``stats.safetensors`` (module docstring) as it was counted (int64 counts),
        whatever its stored layout; InputError when it was not counted, or naming the file when it is
        missing or damaged."""
        if name not in self._names:
            raise InputError(f"{self.path} has no {name!r}: it was counted with {', '.join(self.counted)} only")
        entry = self.manifest.get("storage", {}).get(name)
        with self._arrays() as handle:
            try:
                if entry is None:  # version 1: dense int64 under its name
                    return handle.get_tensor(name)
                parts = [None] if entry["layout"] == "dense" else ["indptr", "indices", "values"]
                return expand(entry, {part: handle.get_tensor(name if part is None else f"{name}.csr.{part}")
                                      for part in parts})
            except (SafetensorError, ValueError, KeyError, TypeError) as error:
                raise InputError(f"{self.path / ARRAYS}: {name!r} cannot be read ({error}): the file is "
                                 "damaged; count the corpus again") from None

    @contextlib.contextmanager
    def _arrays(self):
        """``stats.safetensors`` opened; InputError naming it when it is missing or not safetensors."""
        file = self.path / ARRAYS
        try:
            handle = safe_open(file, framework="numpy")
        except FileNotFoundError:
            raise InputError(f"{file} is missing: the statistics directory is incomplete; count the corpus "
                             "again") from None
        except SafetensorError as error:
            raise InputError(f"{file} cannot be read ({error}): the file is damaged; count the corpus again") from None
        with handle:
            yield handle

    def require(self, *what: str) -> CorpusStats:
        """Refuse (InputError) a directory that lacks one of the statistics ``what``."""
        missing = [name for name in what if name not in self.counted]
        if missing:
            raise InputError(f"{self.path} was counted without {', '.join(missing)}; count it again with "
                             f"--count {','.join(sorted(set(self.counted) | set(missing)))}")
        return self

    def next_rows(self) -> np.ndarray:
        """The next-token rows (T, V) as a dense int64 array."""
        indptr, indices = self.array("next_rows.indptr"), self.array("next_rows.indices")
        counts = self.array("next_rows.counts")
        dense = np.zeros((indptr.size - 1, self.vocab_size), dtype=np.int64)
        rows = np.repeat(np.arange(indptr.size - 1), np.diff(indptr))
        dense[rows, indices] = counts
        return dense

    def check_tokenizer(self, tokenizer) -> None:
        """Refuse (InputError) statistics counted with another tokenizer than ``tokenizer``'s (compared by
        :func:`tokenizer_identity`); statistics counted without a tokenizer are accepted."""
        counted = self.manifest.get("tokenizer")
        mine = tokenizer_identity(tokenizer)
        if counted is None or mine is None:
            return
        if counted != mine:
            raise InputError(f"{self.path} was counted with another tokenizer (vocabulary of {counted['vocab_size']} "
                             f"tokens, sha256 {counted['vocab_sha256'][:12]}) than this model's ({mine['vocab_size']} "
                             f"tokens, sha256 {mine['vocab_sha256'][:12]})")

    def summary(self) -> str:
        """One line: tokens, windows, sources, what was counted."""
        m = self.manifest
        return (f"{m['tokens']:,} tokens in {m['windows']:,} windows of {m['window']} from {len(m['sources'])} "
                f"source(s), V = {m['vocab_size']:,}; counted: {', '.join(m['counted'])}")


def read_stats(path: str | os.PathLike) -> CorpusStats:
    """The statistics directory at ``path`` (:class:`CorpusStats`); InputError when it is not one,
    is unfinished, or has another version."""
    return CorpusStats(path)

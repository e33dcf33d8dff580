"""The statistics directory: a corpus counted once (``ctxstair corpus count``), read by every analysis.

Layout::

    DIR/manifest.json       what was counted, from what (below); written last, so its presence marks a
                            complete directory
    DIR/stats.safetensors   the counts, exact integers (int64), and the sample of windows

``manifest.json`` holds ``format`` (:data:`FORMAT`) and ``version`` (:data:`VERSION`); the
``sources`` (kind, dtype, tokens, documents, and each file's name, size and SHA-256); ``tokens``
counted (inside windows) and ``windows``; ``window`` and ``documents`` (how windows were cut); the
``tokenizer`` (its vocabulary size and the SHA-256 of its vocabulary, or None) and ``vocab_size`` V;
``counted`` (which arrays exist); and ``settings`` (k, prefix_labels, attention_windows, seed, and
whether the tracked tokens were chosen or given).

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
  seeded permutation of all windows (:class:`ctxstair.lm.staircase.StaircaseSetup`'s rule);
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
#: Bumped whenever an array's meaning or the manifest changes; older directories are refused.
VERSION = 1
MANIFEST, ARRAYS = "manifest.json", "stats.safetensors"
#: What every manifest holds (:func:`ctxstair.corpus.count.count_corpus` writes them, with the format
#: and version); a manifest without one of them is damaged.
MANIFEST_KEYS = ("sources", "window", "documents", "vocab_size", "tokenizer", "tokens", "windows", "counted",
                 "settings")
#: The record ``ctxstair corpus tokenize`` writes next to a shard (``PREFIX.ctxstair.json``): the
#: identity of its tokenizer, checked when shards are counted.
RECORD_SUFFIX = ".ctxstair.json"


def write_stats(folder: str | os.PathLike, arrays: dict[str, np.ndarray], manifest: dict) -> None:
    """Write the arrays, then the manifest (which marks the directory complete), each atomically."""
    folder = Path(folder)
    atomic_write_bytes(folder / ARRAYS, save_safetensors({name: np.ascontiguousarray(a) for name, a in arrays.items()}))
    atomic_write_text(folder / MANIFEST, json.dumps({"format": FORMAT, "version": VERSION, **manifest}, indent=2)
                      + "\n")


def tokenizer_identity(tokenizer) -> dict | None:
    """``{"vocab_size", "vocab_sha256"}`` of a tokenizer (a :class:`~ctxstair.lm.tokenizer.TextTokenizer`
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
        if manifest.get("version") != VERSION:
            raise InputError(f"{self.path} was written by statistics version {manifest.get('version')}, this "
                             f"ctxstair reads version {VERSION}: count the corpus again")
        missing = [key for key in MANIFEST_KEYS if key not in manifest]
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
        with self._arrays() as handle:
            return set(handle.keys())

    def array(self, name: str) -> np.ndarray:
        """One array of ``stats.safetensors`` (module docstring); InputError when it was not counted,
        or naming the file when it is missing or damaged."""
        if name not in self._names:
            raise InputError(f"{self.path} has no {name!r}: it was counted with {', '.join(self.counted)} only")
        with self._arrays() as handle:
            try:
                return handle.get_tensor(name)
            except SafetensorError as error:
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

"""Training windows read from tokenized shards while training (SPEC §7, §10), for corpora that do
not fit in memory.

The files are those of :mod:`ctxstair.corpus` (nanoGPT's flat ``.bin``, ``.npy``, Megatron's
``.bin``/``.idx``, Parquet and Arrow columns of Hugging Face datasets), windowed by its rule
(:mod:`ctxstair.corpus.sources`): windows of ``corpus.window`` tokens that do not overlap, numbered
file after file in the order the paths are given (a directory: its shards in sorted order). The
trainer draws window numbers exactly as it draws rows of an in-memory window array, so a run on
shards holding the ids a text corpus tokenizes to is the run on that text, bit for bit; a batch
reads its windows from the files (one small read each) and nothing else stays in memory.
"""

from __future__ import annotations

import numpy as np

from ctxstair.config.lm import CorpusConfig
from ctxstair.corpus import open_sources, windows
from ctxstair.errors import InputError


class ShardWindows:
    """The windows of ``cfg.shards`` (at most ``cfg.max_tokens // cfg.window`` when ``max_tokens``
    is set), with ids checked against ``vocab_size`` as they are read.

    Attributes:
        window: T, tokens per window.
        indexes: one :class:`~ctxstair.corpus.sources.WindowIndex` per file.
    """

    def __init__(self, cfg: CorpusConfig, vocab_size: int):
        paths = [part for part in cfg.shards.split("+") if part]
        self.window, self.vocab_size = cfg.window, vocab_size
        self.indexes = [windows(source, cfg.window, cfg.documents)
                        for source in open_sources(paths, dtype=cfg.dtype or None)]
        if not self.indexes:
            raise InputError(f"corpus.shards={cfg.shards!r} holds no token files")
        # first[f] is the number of the first window of file f; first[-1] is the number of windows.
        self._first = np.concatenate([[0], np.cumsum([index.n_windows for index in self.indexes])])
        total = int(self._first[-1])
        self._n = min(total, cfg.max_tokens // cfg.window) if cfg.max_tokens else total
        if self._n < 2:
            raise InputError(f"corpus.shards={cfg.shards!r} has {self._n} window(s) of {cfg.window} tokens: "
                             "fewer than two")
        # Ids beyond the vocabulary (shards of another tokenizer, a flat .bin read with the wrong dtype)
        # are refused here for the first and last window of every file, and later for every batch read.
        ends = np.unique(np.concatenate([self._first[:-1], self._first[1:] - 1]).clip(0, self._n - 1))
        self[ends]

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, ids: np.ndarray) -> np.ndarray:
        """int64 (len(ids), T): the windows numbered ``ids`` (int, (b,)), in that order."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and not (ids.min() >= 0 and ids.max() < self._n):
            raise InputError(f"window numbers outside [0, {self._n}) asked of corpus.shards")
        files = np.searchsorted(self._first, ids, side="right") - 1
        out = np.empty((len(ids), self.window), dtype=np.int64)
        for file in np.unique(files):
            here = files == file
            out[here] = self.indexes[file].take(ids[here] - self._first[file])
        if out.size and (out.min() < 0 or out.max() >= self.vocab_size):
            bad = int(out.max()) if out.max() >= self.vocab_size else int(out.min())
            raise InputError(f"corpus.shards holds the token id {bad}, outside the tokenizer's vocabulary of "
                             f"{self.vocab_size}: the shards were made with another tokenizer (corpus.tokenizer)")
        return out

    def describe(self) -> str:
        """One line: files and windows, for messages."""
        return f"{len(self.indexes)} token file(s), {self._n} windows of {self.window} tokens"

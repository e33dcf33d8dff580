"""A corpus as token windows (SPEC §7, §10): the tokenizer (a byte-level BPE trained on the text, or
GPT-2's vocabulary, or a saved ``tokenizer.json``), consecutive windows of ``corpus.window`` tokens (or
the windows of token shards, :mod:`ctxstair.text.shard_windows`), and the seeded held-out split.
The language-model trainer and its analysis read the corpus through these functions, so both see
the same windows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair.config.lm import CorpusConfig, LMConfig
from ctxstair.errors import InputError
from ctxstair.text.corpora import load_text
from ctxstair.text.shard_windows import ShardWindows
from ctxstair.text.tokenizer import TextTokenizer


def build_tokenizer(cfg: CorpusConfig, text: str) -> TextTokenizer:
    """The tokenizer ``cfg.tokenizer`` names (SPEC §10): a byte-level BPE of ``cfg.vocab_size``
    trained on ``text``, a word-level vocabulary of that size, or GPT-2's vocabulary."""
    if cfg.tokenizer == "gpt2":
        return TextTokenizer.gpt2()
    if cfg.tokenizer.endswith(".json"):
        return TextTokenizer.load(cfg.tokenizer)
    train = TextTokenizer.train_words if cfg.tokenizer == "word" else TextTokenizer.train_bpe
    return train(text, cfg.vocab_size)


def make_windows(ids: np.ndarray, window: int) -> np.ndarray:
    """Consecutive non-overlapping windows (n, window) of a token stream (the tail is dropped)."""
    n = len(ids) // window
    if n < 2:
        raise InputError(f"the corpus has {len(ids)} tokens: fewer than two windows of {window}")
    return np.ascontiguousarray(ids[: n * window].reshape(n, window))


def split_indices(n: int, seed: int, max_heldout: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) window numbers, each sorted, of ``n`` windows: a seeded 5 % (at least one
    window) is held out for the val loss; ``max_heldout`` (> 0) keeps only the first that many
    held-out windows of the seeded order (the training windows stay the same)."""
    order = np.random.default_rng(seed).permutation(n)
    n_val = max(1, n // 20)
    return np.sort(order[n_val:]), np.sort(order[:n_val][: max_heldout or None])


def split_windows(windows: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) windows (:func:`split_indices`) of a window array (n, T)."""
    train, val = split_indices(len(windows), seed)
    return windows[train], windows[val]


def sample_indices(ids: np.ndarray, limit: int, seed: int) -> np.ndarray:
    """``ids`` when ``limit`` is 0 or they are no more, else a seeded sample of ``limit`` of them, sorted."""
    if not limit or len(ids) <= limit:
        return ids
    return np.sort(np.random.default_rng(seed).choice(ids, limit, replace=False))


def read_tokenizer(out: str | Path) -> TextTokenizer:
    """The tokenizer saved in an LM run directory (``tokenizer.json``)."""
    return TextTokenizer.load(Path(out) / "tokenizer.json")


def corpus_windows(cfg: LMConfig, out: Path | None = None) -> tuple[TextTokenizer, np.ndarray | ShardWindows]:
    """Tokenizer and all windows (n, T) of the run's corpus: an array for text, a
    :class:`~ctxstair.text.shard_windows.ShardWindows` (indexed like one) for ``corpus.shards``. The tokenizer is
    read from ``out`` when the run directory has one (so a resumed or analysed run uses the same vocabulary)."""
    saved = out / "tokenizer.json" if out is not None else None
    if cfg.corpus.shards:
        tokenizer = read_tokenizer(out) if saved is not None and saved.is_file() else build_tokenizer(cfg.corpus, "")
        return tokenizer, ShardWindows(cfg.corpus, tokenizer.vocab_size)
    text = load_text(cfg.corpus.source)
    tokenizer = read_tokenizer(out) if saved is not None and saved.is_file() else build_tokenizer(cfg.corpus, text)
    ids = tokenizer.encode(text, max_tokens=cfg.corpus.max_tokens or None)
    try:
        return tokenizer, make_windows(ids, cfg.corpus.window)
    except InputError as error:
        raise InputError(f"corpus {cfg.corpus.source!r}: {error} (corpus.window={cfg.corpus.window})") from None

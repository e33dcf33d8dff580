"""Tokenizers for the language-model measurements (SPEC §7, §10).

:class:`TextTokenizer` wraps a Hugging Face ``tokenizers.Tokenizer`` from one of four places:

* :meth:`TextTokenizer.train_bpe` — a byte-level BPE trained on the corpus at a chosen size;
* :meth:`TextTokenizer.train_words` — a lower-cased word-level vocabulary of the corpus's most
  frequent words and punctuation runs, with ``[UNK]`` for the rest;
* :meth:`TextTokenizer.gpt2` — the real GPT-2 vocabulary (``ctxstair data fetch gpt2-vocab``);
* :meth:`TextTokenizer.from_pretrained_dir` / :meth:`TextTokenizer.from_gguf` /
  :meth:`TextTokenizer.from_transformers` — the tokenizer of a model (a Hugging Face model directory,
  a GGUF file, or a loaded ``transformers`` tokenizer);
* :meth:`TextTokenizer.named` — any of these as a command line names it (``gpt2``, a file, a model
  folder, a fetched model such as ``smollm2``).

Token ids are the tokenizer's own; special tokens are never added by :meth:`TextTokenizer.encode`.

Example::

    tok = TextTokenizer.train_bpe(load_text("synthetic"), vocab_size=2000)
    ids = tok.encode("after monday comes tuesday .")    # int64 (n,)
    tok.token_string(int(ids[1]))                       # ' monday'
    tok.word_token_id("monday") == ids[1]               # True
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from ctxstair.checks import int_in_range
from ctxstair.errors import InputError
from ctxstair.io import atomic_write_text
from ctxstair.text.corpora import SOURCES, fetched, files

#: Characters per piece when a long text is encoded piecewise (:meth:`TextTokenizer.encode`).
PIECE_CHARS = 1 << 20
#: Where a piece may end: right after a newline between two non-space characters. (After a run of
#: blank lines, "\n\n" at the end of a piece would be one pre-token where the whole text has two.)
_PIECE_END = re.compile(r"(?<=\S)\n(?=\S)")

# What a tokenizer may put before a word to mark a preceding space: a plain space (byte-level
# BPE, decoded), SentencePiece's "▁", or GPT-2's raw "Ġ" where no decoder maps it back.
_SPACE_MARKERS = (" ", "\u2581", "\u0120")
#: The out-of-vocabulary token of :meth:`TextTokenizer.train_words`.
UNKNOWN = "[UNK]"


class TextTokenizer:
    """A ``tokenizers.Tokenizer`` with the few operations the measurements need."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer

    # --- construction -------------------------------------------------------------------------

    @classmethod
    def train_bpe(cls, text: str, vocab_size: int, min_frequency: int = 2) -> TextTokenizer:
        """Byte-level BPE (GPT-2 style: every byte is a token, so any text round-trips) trained
        on ``text``; the same text and settings give the same vocabulary and merges.

        Args:
            vocab_size: at least 257 (the 256 byte tokens plus one merge); fewer tokens result
                if the text has fewer pairs worth merging.
            min_frequency: a pair must occur this often to be merged.
        """
        _check_training_args(text, vocab_size, min_frequency)
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tokenizer.train_from_iterator(text.splitlines(keepends=True), trainer)
        return cls(tokenizer)

    @classmethod
    def train_words(cls, text: str, vocab_size: int, min_frequency: int = 2) -> TextTokenizer:
        """Word-level tokenizer trained on ``text``: lower-cased words and runs of punctuation
        (``\\w+|[^\\w\\s]+``) are the tokens; the ``vocab_size - 1`` most frequent ones seen at
        least ``min_frequency`` times keep their own id and every other piece becomes ``[UNK]``
        (id 0). A word is then one token wherever it occurs, so its next-token statistics are
        counted over all its occurrences, at the price of text that does not round-trip."""
        _check_training_args(text, vocab_size, min_frequency)
        tokenizer = Tokenizer(models.WordLevel(unk_token=UNKNOWN))
        tokenizer.normalizer = normalizers.Lowercase()
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                            special_tokens=[UNKNOWN])
        tokenizer.train_from_iterator(text.splitlines(), trainer)
        return cls(tokenizer)

    @classmethod
    def gpt2(cls) -> TextTokenizer:
        """The GPT-2 tokenizer (50,257 tokens) from the fetched ``gpt2-vocab`` files."""
        folder = fetched("gpt2-vocab")
        if folder is None:
            raise InputError("the GPT-2 vocabulary is not fetched; run: ctxstair data fetch gpt2-vocab")
        tokenizer = Tokenizer(models.BPE.from_file(str(folder / "encoder.json"), str(folder / "vocab.bpe")))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        return cls(tokenizer)

    @classmethod
    def from_pretrained_dir(cls, path: str | os.PathLike) -> TextTokenizer:
        """The tokenizer of a Hugging Face model directory (its ``tokenizer.json``)."""
        file = Path(path) / "tokenizer.json"
        if not file.is_file():
            raise InputError(f"{path} has no tokenizer.json (a Hugging Face model directory with a fast tokenizer)")
        return cls.load(file)

    @classmethod
    def from_transformers(cls, tokenizer: object) -> TextTokenizer:
        """The ``tokenizers`` backend of a loaded ``transformers`` (fast) tokenizer."""
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if not isinstance(backend, Tokenizer):
            raise InputError(f"{type(tokenizer).__name__} has no tokenizers backend; load it with use_fast=True")
        return cls(backend)

    @classmethod
    def from_gguf(cls, file: str | os.PathLike) -> TextTokenizer:
        """The tokenizer stored in a GGUF file's metadata (llama.cpp's format), rebuilt by ``transformers``
        as ``from_pretrained(gguf_file=...)`` rebuilds it; InputError naming the file when it cannot."""
        from transformers import AutoTokenizer

        file = Path(file)
        with quiet_transformers():
            try:
                # trust_remote_code=False: a tokenizer_config.json next to the file may name custom code.
                tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name, trust_remote_code=False)
            except (OSError, ValueError, KeyError) as error:
                message = (str(error).strip().splitlines() or [type(error).__name__])[0]
                raise InputError(f"cannot read the tokenizer of {file}: {message}") from None
        return cls.from_transformers(tokenizer)

    @classmethod
    def named(cls, name: str | os.PathLike) -> TextTokenizer:
        """The tokenizer a command line names: ``gpt2``; a ``tokenizer.json`` or ``.gguf`` file; a model
        folder (its ``tokenizer.json``, else its one ``.gguf`` file); or the name of a fetched model
        (``smollm2``: the tokenizer of its GGUF file in the cache, ``ctxstair data list``)."""
        path = Path(name).expanduser()
        if str(name) == "gpt2":
            return cls.gpt2()
        if path.is_file():
            return cls.from_gguf(path) if path.suffix == ".gguf" else cls.load(path)
        if path.is_dir():
            ggufs = sorted(path.glob("*.gguf"))
            if not (path / "tokenizer.json").is_file() and len(ggufs) == 1:
                return cls.from_gguf(ggufs[0])
            return cls.from_pretrained_dir(path)
        source = SOURCES.get(str(name))
        if source is None or source.kind == "corpus":
            models = ", ".join(n for n, s in SOURCES.items() if s.kind == "model")
            raise InputError(f"unknown tokenizer {name!r}: give gpt2, a tokenizer.json or .gguf file, a model folder "
                             f"or a fetched model's name ({models})")
        if source.kind == "vocabulary":
            return cls.gpt2()
        found = files(source.name)  # InputError naming `ctxstair data fetch` when not fetched
        if not found:
            raise InputError(f"the cache folder of {source.name} holds no {source.content}: fetch it again")
        return cls.from_gguf(found[0])

    @classmethod
    def load(cls, path: str | os.PathLike) -> TextTokenizer:
        """Read a ``tokenizer.json`` written by :meth:`save` (or by Hugging Face)."""
        try:
            return cls(Tokenizer.from_file(str(path)))
        except Exception as error:  # tokenizers raises a bare Exception for missing or bad files
            raise InputError(f"cannot read tokenizer file {path}: {str(error).splitlines()[0]}") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the tokenizer as ``tokenizer.json`` (Hugging Face format) atomically."""
        atomic_write_text(path, self.tokenizer.to_str(pretty=True))

    # --- use ----------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Number of token ids, added (special) tokens included."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, max_tokens: int | None = None) -> np.ndarray:
        """Token ids of ``text``, int64 (n,), without special tokens; only the first ``max_tokens``
        when given.

        A long text is encoded piece by piece (about :data:`PIECE_CHARS` characters, each cut
        after a newline between two non-space characters) when the tokenizer is byte-level with
        no normaliser: its pre-tokenizer always ends a piece of text there, so the ids are those of
        one call (checked by the tests), while the tokenizer's per-token objects (hundreds of bytes
        each) exist for one piece at a time and encoding stops once ``max_tokens`` are reached
       . Other tokenizers (SentencePiece-style, with a normaliser) encode the
        whole text in one call."""
        if not self._splits_at_newlines:
            ids = np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int64)
            return ids[:max_tokens] if max_tokens else ids
        parts, count, start = [], 0, 0
        while start < len(text) and not (max_tokens and count >= max_tokens):
            cut = _PIECE_END.search(text, start + PIECE_CHARS) if len(text) - start > PIECE_CHARS else None
            end = cut.end() if cut else len(text)
            parts.append(np.asarray(self.tokenizer.encode(text[start:end], add_special_tokens=False).ids,
                                    dtype=np.int32))
            count, start = count + parts[-1].size, end
        ids = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)
        return ids[:max_tokens] if max_tokens else ids

    @functools.cached_property
    def _splits_at_newlines(self) -> bool:
        """Whether encoding may be split after a newline followed by a non-space character: no
        normaliser and only byte-level pre-tokenization (optionally after a regex split or digit
        splitting), without an added prefix space; or lower-casing and whitespace pre-tokenization
        (:meth:`train_words`), which never joins characters across whitespace."""
        spec = json.loads(self.tokenizer.to_str())
        pre = spec.get("pre_tokenizer") or {}
        steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
        if [step.get("type") for step in steps] == ["Whitespace"]:
            return (spec.get("normalizer") or {}).get("type", "Lowercase") == "Lowercase"
        return (spec.get("normalizer") is None and any(step.get("type") == "ByteLevel" for step in steps)
                and all(step.get("type") in ("ByteLevel", "Split", "Digits") for step in steps)
                and not any(step.get("add_prefix_space") for step in steps))

    def decode(self, ids) -> str:
        """The text of a sequence of token ids (special tokens kept)."""
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_string(self, token_id: int) -> str:
        """The decoded text of one token, e.g. ``" monday"``; a token that is only part of a
        multi-byte character decodes to the replacement character."""
        return self.decode([token_id])

    def word_like(self, ids) -> np.ndarray:
        """bool (n,): whether each token decodes to letters only once one leading space marker
        is stripped (SPEC §7's eligible tokens): " monday" and "Monday" are word-like; " 12", ","
        and "'t" are not."""
        return np.array([_strip_space_marker(self.token_string(int(i))).isalpha() for i in ids], dtype=bool)

    def word_token_id(self, word: str) -> int | None:
        """The single token that spells ``" " + word`` (preferred) or ``word``; None if the
        tokenizer splits both or knows the word only as its unknown token."""
        for spelling in (" " + word, word):
            ids = self.tokenizer.encode(spelling, add_special_tokens=False).ids
            if len(ids) == 1 and ids[0] != self._unknown_id:
                return ids[0]
        return None

    @functools.cached_property
    def _unknown_id(self) -> int | None:
        """The id of the model's unknown token (word-level and SentencePiece vocabularies), if any."""
        unknown = json.loads(self.tokenizer.to_str())["model"].get("unk_token")
        return self.tokenizer.token_to_id(unknown) if unknown else None


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence ``transformers`` warnings and progress bars (``save_pretrained``'s "Writing model
    shards") for one load or save, then restore them; and DeepSpeed's warnings, which ``accelerate``
    imports when it is installed and whose "Setting accelerator to CPU" goes to stdout (its logger
    writes there), where a command's result belongs."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    deepspeed = logging.getLogger("DeepSpeed")  # the same logger object before and after DeepSpeed is imported
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    deepspeed.addFilter(_below_error)
    try:
        yield
    finally:
        deepspeed.removeFilter(_below_error)
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def _below_error(record: logging.LogRecord) -> bool:
    """A logging filter that keeps errors only."""
    return record.levelno >= logging.ERROR


def _check_training_args(text: str, vocab_size: int, min_frequency: int) -> None:
    int_in_range("vocab_size", vocab_size, 257)
    int_in_range("min_frequency", min_frequency, 1)
    if not text:
        raise InputError("cannot train a tokenizer on empty text")


def _strip_space_marker(token: str) -> str:
    return token[1:] if token[:1] in _SPACE_MARKERS else token

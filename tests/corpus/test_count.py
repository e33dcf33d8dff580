"""Corpus statistics over tokenized shards (ctxstair.corpus.count_corpus): planted corpora in every
format against brute-force counts written here, executors and a killed count giving byte-identical
directories, and the bad inputs refused with one line."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from command_helpers import in_process

from ctxstair.corpus import count_corpus, read_stats
from ctxstair.corpus.megatron import write_indexed
from ctxstair.corpus.sources import open_source
from ctxstair.errors import InputError

V, W = 40, 8
TOKENS = [3, 5, 7, 11, 13]
SETTINGS = dict(vocab_size=V, window=W, tokens=TOKENS, prefix_labels=9, attention_windows=6, seed=3)


def planted_documents(seed: int = 0, n_docs: int = 12) -> list[np.ndarray]:
    """Documents of a Markov stream over V ids in which 3 is always followed by 7 and 5 never ends a
    document: statistics that brute force must find."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n_docs):
        doc = rng.integers(0, V, size=int(rng.integers(0, 60)))
        doc[np.flatnonzero(doc[:-1] == 3) + 1] = 7
        docs.append(doc.astype(np.int64))
    docs.insert(3, np.zeros(0, dtype=np.int64))  # an empty document
    return docs


def brute_windows(docs: list[np.ndarray], documents: str) -> list[list[int]]:
    """Windows by the documented rule, written with Python lists."""
    streams = [[int(t) for d in docs for t in d]] if documents == "joined" else [[int(t) for t in d] for d in docs]
    return [s[i * W:(i + 1) * W] for s in streams for i in range(len(s) // W)]


def brute_counts(windows: list[list[int]], tokens: list[int], labels: list[int]) -> dict:
    """Every statistic of a count, by loops over windows and positions."""
    unigram, later = np.zeros(V, dtype=np.int64), np.zeros(V, dtype=np.int64)
    rows = np.zeros((len(tokens), V), dtype=np.int64)
    prefix = np.zeros((len(tokens), len(labels), len(tokens)), dtype=np.int64)
    for w in windows:
        for s, token in enumerate(w):
            unigram[token] += 1
            later[token] += s >= 1
            if s + 1 < len(w) and token in tokens:
                a = tokens.index(token)
                rows[a, w[s + 1]] += 1
                if w[s + 1] in labels:
                    for b, beta in enumerate(tokens):
                        prefix[a, labels.index(w[s + 1]), b] += beta in w[:s]
    return {"unigram": unigram, "next_position": later, "next_rows": rows, "prefix_counts": prefix,
            "events": rows.sum(axis=1)}


def brute_labels(later: np.ndarray, tokens: list[int], total: int) -> list[int]:
    ranked = sorted((i for i in range(V) if later[i] > 0 and i not in tokens), key=lambda i: (-later[i], i))
    return sorted(tokens + ranked[: total - len(tokens)])


def write_format(kind: str, docs: list[np.ndarray], folder: Path) -> Path:
    """The documents in one file format."""
    flat = np.concatenate(docs)
    if kind == "flat":
        path = folder / "train.bin"
        flat.astype(np.uint16).tofile(path)
    elif kind == "npy":
        path = folder / "part-0.npy"
        np.save(path, flat.astype(np.uint32))
    elif kind == "megatron":
        path = write_indexed(folder / "pile_text_document", docs, "uint16")[1]
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({"input_ids": pa.array([d.tolist() for d in docs], type=pa.list_(pa.int32())),
                          "text": [f"doc {i}" for i in range(len(docs))]})
        if kind == "parquet":
            path = folder / "train-00000.parquet"
            pq.write_table(table, path, row_group_size=4)
        else:
            path = folder / "data-00000.arrow"
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
                for batch in table.to_batches(max_chunksize=5):
                    writer.write_batch(batch)
    return path


def check_against_brute_force(stats, windows: list[list[int]]) -> None:
    reference = brute_counts(windows, TOKENS, list(range(V)))
    labels = brute_labels(reference["next_position"], TOKENS, SETTINGS["prefix_labels"])
    reference = brute_counts(windows, TOKENS, labels)
    np.testing.assert_array_equal(stats.array("tokens"), TOKENS)
    np.testing.assert_array_equal(stats.array("prefix_labels"), labels)
    for name in ("unigram", "next_position", "prefix_counts", "events"):
        np.testing.assert_array_equal(stats.array(name), reference[name], err_msg=name)
    np.testing.assert_array_equal(stats.next_rows(), reference["next_rows"])
    chosen = np.random.default_rng(SETTINGS["seed"]).permutation(len(windows))[: SETTINGS["attention_windows"]]
    np.testing.assert_array_equal(stats.array("sample_indices"), chosen)
    np.testing.assert_array_equal(stats.array("sample"), [windows[i] for i in chosen])
    assert stats.manifest["tokens"] == len(windows) * W and stats.manifest["windows"] == len(windows)


@pytest.mark.parametrize("kind", ["flat", "npy", "megatron", "parquet", "arrow"])
def test_every_format_counts_what_brute_force_counts(kind, tmp_path):
    docs = planted_documents()
    path = write_format(kind, docs, tmp_path)
    stats = count_corpus([path], tmp_path / "stats", unit_tokens=3 * W, **SETTINGS)
    windows = brute_windows(docs, "joined")
    check_against_brute_force(stats, windows)
    rows = stats.next_rows()
    assert rows[TOKENS.index(3), 7] == rows[TOKENS.index(3)].sum() > 0  # the planted pair
    if kind in ("megatron", "parquet", "arrow"):
        separate = count_corpus([path], tmp_path / "separate", documents="separate", unit_tokens=2 * W, **SETTINGS)
        check_against_brute_force(separate, brute_windows(docs, "separate"))


def test_several_shards_are_windowed_one_by_one_and_summed(tmp_path):
    first, second = planted_documents(1), planted_documents(2)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    paths = [write_format("megatron", first, tmp_path / "a"), write_format("npy", second, tmp_path / "b")]
    stats = count_corpus(paths, tmp_path / "stats", **SETTINGS)
    check_against_brute_force(stats, brute_windows(first, "joined") + brute_windows(second, "joined"))
    assert [s["kind"] for s in stats.manifest["sources"]] == ["megatron", "npy"]
    assert all(len(f["sha256"]) == 64 for s in stats.manifest["sources"] for f in s["files"])


def test_tokens_chosen_as_the_most_frequent_word_like_ones(tmp_path):
    from ctxstair.measure.staircase import staircase_tokens
    from ctxstair.text.tokenizer import TextTokenizer

    text = "the cat sat on the mat . the dog sat on a log , and the cat ran .\n" * 40
    tokenizer = TextTokenizer.train_words(text, 300, min_frequency=1)
    ids = tokenizer.encode(text)
    np.save(tmp_path / "ids.npy", ids.astype(np.uint16))
    stats = count_corpus([tmp_path / "ids.npy"], tmp_path / "stats", tokenizer=tokenizer, window=W, k=6)
    windows = ids[: ids.size // W * W].reshape(-1, W)
    np.testing.assert_array_equal(stats.array("tokens"), staircase_tokens(windows, tokenizer, 6))
    assert stats.manifest["tokenizer"]["vocab_size"] == tokenizer.vocab_size


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_one_two_workers_and_ray_give_byte_identical_directories(tmp_path, monkeypatch):
    from ctxstair.corpus import count as count_module

    # A corpus this small would be counted in this process (workers_for): two processes all the same,
    # since they are what is checked.
    monkeypatch.setattr(count_module, "TOKENS_PER_WORKER", 1)
    monkeypatch.setattr(count_module, "LIGHT_TOKENS_PER_WORKER", 1)
    path = write_format("megatron", planted_documents(4, n_docs=60), tmp_path)
    outs = {}
    for name, options in (("one", {"workers": 1}), ("two", {"workers": 2}), ("ray", {"ray": "local"})):
        stats = count_corpus([path], tmp_path / name, unit_tokens=5 * W, **options, **SETTINGS)
        outs[name] = _files(stats.path)
    import ray

    ray.shutdown()
    assert list(outs["one"]) == ["ctxstair.sha256", "manifest.json", "stats.safetensors"]
    assert outs["one"] == outs["two"] == outs["ray"]
    # The unit size changes how the work is split, never the sums.
    other = count_corpus([path], tmp_path / "big-units", unit_tokens=1000 * W, **SETTINGS)
    assert _files(other.path) == outs["one"]


@pytest.mark.parametrize("kind", ["flat", "megatron"])
def test_a_file_written_again_or_reached_from_another_folder_is_counted_afresh(kind, tmp_path, monkeypatch):
    """In one process (a notebook), the same path names new ids after the file is written again (the
    same lengths, so stale windows would pass unseen), and a relative path names another file after a
    change of working directory (other lengths): each count is its own file's brute-force count."""
    first = planted_documents(1)
    again = [(doc + 1) % V for doc in first]
    other = planted_documents(2)
    for folder, docs in (("a", first), ("b", other)):
        (tmp_path / folder).mkdir()
        write_format(kind, docs, tmp_path / folder)
    path = write_format(kind, first, tmp_path / "a")
    monkeypatch.chdir(tmp_path / "a")
    check_against_brute_force(count_corpus([path.name], tmp_path / "first", **SETTINGS), brute_windows(first, "joined"))
    write_format(kind, again, tmp_path / "a")
    check_against_brute_force(count_corpus([path.name], tmp_path / "again", **SETTINGS), brute_windows(again, "joined"))
    monkeypatch.chdir(tmp_path / "b")
    check_against_brute_force(count_corpus([path.name], tmp_path / "other", **SETTINGS), brute_windows(other, "joined"))


def test_a_count_starts_no_more_workers_than_its_size_repays():
    from ctxstair.corpus.count import LIGHT_TOKENS_PER_WORKER, TOKENS_PER_WORKER, workers_for

    assert TOKENS_PER_WORKER < LIGHT_TOKENS_PER_WORKER
    assert workers_for(10, 8) == 1
    assert workers_for(TOKENS_PER_WORKER - 1, 2) == 1
    assert workers_for(2 * TOKENS_PER_WORKER, 2) == 2
    assert workers_for(3 * TOKENS_PER_WORKER, 8) == 3
    assert workers_for(100 * TOKENS_PER_WORKER, 8) == 8
    # A count without prefix counts, bigram table or word groups counts each token faster, so a
    # worker needs a larger share; any of the three makes the count heavy.
    light = ("unigram", "next", "sample")
    assert workers_for(3 * TOKENS_PER_WORKER, 8, light) == 1
    assert workers_for(2 * LIGHT_TOKENS_PER_WORKER, 2, light) == 2
    for heavy in ("prefix", "bigram", "groups"):
        assert workers_for(3 * TOKENS_PER_WORKER, 8, ("unigram", heavy)) == 3


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctxstair", "corpus", *args], cwd=cwd, capture_output=True, text=True)


def test_a_killed_count_resumes_to_the_same_bytes(tmp_path):
    rng = np.random.default_rng(0)
    rng.integers(0, V, size=400_000).astype(np.uint16).tofile(tmp_path / "train.bin")
    args = ["count", "train.bin", "--vocab-size", str(V), "--window", str(W), "--tokens", ",".join(map(str, TOKENS)),
            "--prefix-labels", "9", "--sample-windows", "6", "--unit-tokens", "4096"]
    assert _cli(*args, "--out", "whole", cwd=tmp_path).returncode == 0
    process = subprocess.Popen([sys.executable, "-m", "ctxstair", "corpus", *args, "--out", "killed"], cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    work = tmp_path / "killed" / ".units"
    deadline = time.monotonic() + 120
    while len(list(work.glob("*.json"))) < 30 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    finished = len(list(work.glob("rows-*.json")) + list(work.glob("unigram-*.json")))
    assert 0 < finished < 2 * 98, "the kill did not land in the middle of the count"
    assert (work / "plan.json").is_file(), "a unit was recorded done before the plan it belongs to"
    assert not (tmp_path / "killed" / "manifest.json").exists()
    with pytest.raises(InputError, match="unfinished count"):
        read_stats(tmp_path / "killed")
    refused = _cli(*args, "--out", "killed", cwd=tmp_path)
    assert refused.returncode == 2 and "--resume" in refused.stderr
    resumed = _cli(*args, "--out", "killed", "--resume", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert _files(tmp_path / "killed") == _files(tmp_path / "whole")


def test_a_count_killed_before_it_recorded_its_plan_starts_afresh_on_resume(tmp_path):
    """The sources are hashed while the first units count, and the plan is recorded before the first
    unit is: a count killed before that left a claimed directory with a work folder, no plan and no
    unit recorded (perhaps a unit file written but not recorded); resumed, it counts everything again,
    to the bytes of a count never killed."""
    rng = np.random.default_rng(1)
    rng.integers(0, V, size=50_000).astype(np.uint16).tofile(tmp_path / "train.bin")
    options = dict(vocab_size=V, window=W, tokens=TOKENS, prefix_labels=9, attention_windows=6, unit_tokens=4096)
    count_corpus([tmp_path / "train.bin"], tmp_path / "whole", **options)
    work = tmp_path / "killed" / ".units"
    work.mkdir(parents=True)
    (work / "unigram-000000.safetensors").write_bytes(b"written, never recorded")
    count_corpus([tmp_path / "train.bin"], tmp_path / "killed", resume=True, **options)
    assert _files(tmp_path / "killed") == _files(tmp_path / "whole")
    with pytest.raises(InputError, match="complete statistics directory"):
        count_corpus([tmp_path / "train.bin"], tmp_path / "killed", resume=True, **options)


def corpus_command(*args: str, capsys, cwd: Path) -> subprocess.CompletedProcess:
    """``ctxstair corpus *args`` from ``cwd``, in this process (:func:`command_helpers.in_process`)."""
    return in_process(["corpus", *args], capsys, cwd)


def _refused(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_bad_inputs_are_refused_with_one_line_and_nothing_written(tmp_path, capsys):
    corpus = functools.partial(corpus_command, capsys=capsys, cwd=tmp_path)
    docs = planted_documents()
    write_format("flat", docs, tmp_path)
    base = ["--window", str(W), "--tokens", "3,5,7,11"]
    _refused(corpus("count", "train.bin", "--vocab-size", "20", *base, "--out", "small"),
             "outside the vocabulary of 20")
    assert not (tmp_path / "small").exists()
    # A signed dtype can hold a negative id, which an index would read from the end of a table.
    (tmp_path / "signed.bin").write_bytes(np.array([3, 5, -4, 7] * 40, dtype=np.int32).tobytes())
    _refused(corpus("count", "signed.bin", "--dtype", "int32", "--vocab-size", str(V), *base, "--out", "n"),
             "token id -4")
    # ... and a uint64 id past 2^63 is checked before it becomes an int64 (where it would be negative).
    np.save(tmp_path / "wide.npy", np.array([3, 5, 2**63 + 5, 7] * 40, dtype=np.uint64))
    _refused(corpus("count", "wide.npy", "--vocab-size", str(V), *base, "--out", "u"),
             f"token id {2**63 + 5}")
    np.save(tmp_path / "floats.npy", np.ones(100))
    _refused(corpus("count", "floats.npy", "--vocab-size", str(V), *base, "--out", "f"), "floats.npy")
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
    _refused(corpus("count", "odd.bin", "--vocab-size", str(V), *base, "--out", "o"), "odd.bin")
    prefix = tmp_path / "cut"
    write_indexed(prefix, docs, "uint16")
    data = (tmp_path / "cut.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[: len(data) // 2])
    _refused(corpus("count", "cut.idx", "--vocab-size", str(V), *base, "--out", "c"), "cut")
    write_indexed(prefix, docs, "uint16")
    index = (tmp_path / "cut.idx").read_bytes()
    (tmp_path / "cut.idx").write_bytes(index[: len(index) - 8])
    _refused(corpus("count", "cut.idx", "--vocab-size", str(V), *base, "--out", "c"), "cut.idx")
    write_format("parquet", docs, tmp_path)
    _refused(corpus("count", "train-00000.parquet", "--column", "ids", "--vocab-size", str(V), *base, "--out", "p"),
             "ids")
    (tmp_path / "text.txt").write_text("hello\n")
    _refused(corpus("count", "text.txt", "--vocab-size", str(V), *base, "--out", "t"), "tokenize")
    for name in ("small", "n", "u", "f", "o", "c", "p", "t"):
        assert not (tmp_path / name).exists(), name


def test_a_text_file_named_bin_is_refused_unless_accepted_as_tokens(tmp_path, capsys):
    corpus = functools.partial(corpus_command, capsys=capsys, cwd=tmp_path)
    text = "It was the best of times, it was the worst of times.\n" * 4000  # 212 kB: every id < 2^16
    (tmp_path / "train.bin").write_text(text)
    args = ["count", "train.bin", "--vocab-size", str(2**16), "--window", str(W), "--tokens", "3,5,7,11"]
    _refused(corpus(*args, "--out", "refused"), "train.bin: its first 212,000 bytes read as text",
             "--text-ok")
    assert not (tmp_path / "refused").exists()
    accepted = corpus(*args, "--text-ok", "--out", "accepted")
    assert accepted.returncode == 0, accepted.stderr
    assert read_stats(tmp_path / "accepted").manifest["tokens"] == len(text) // 2 // W * W
    # Token ids are not text: a uint16 file of ids below 256 has a zero byte in every id, and random
    # ids over a large vocabulary leave few runs of printable bytes.
    rng = np.random.default_rng(0)
    for name, ids in [("small-ids.bin", rng.integers(0, 256, 5000)), ("large-ids.bin", rng.integers(0, 50_000, 5000))]:
        ids.astype(np.uint16).tofile(tmp_path / name)
        assert open_source(tmp_path / name).n_tokens == 5000


def test_statistics_of_another_version_or_tokenizer_are_refused(tmp_path):
    from ctxstair.measure.staircase import StaircaseSettings, StaircaseSetup
    from ctxstair.text.tokenizer import TextTokenizer

    text = "the cat sat on the mat and the dog sat on the log\n" * 50
    tokenizer = TextTokenizer.train_words(text, 300, min_frequency=1)
    np.save(tmp_path / "ids.npy", tokenizer.encode(text).astype(np.uint16))
    stats = count_corpus([tmp_path / "ids.npy"], tmp_path / "stats", tokenizer=tokenizer, window=W, k=5,
                         prefix_labels=8, attention_windows=4)
    settings = StaircaseSettings(k=5, prefix_labels=8, attention_windows=4, path_windows=1)
    StaircaseSetup.from_stats(stats.path, settings, tokenizer=tokenizer)
    other = TextTokenizer.train_words(text.replace("cat", "cow"), 300, min_frequency=1)
    with pytest.raises(InputError, match="another tokenizer"):
        StaircaseSetup.from_stats(stats.path, settings, tokenizer=other)
    with pytest.raises(InputError, match="other settings: k 5"):
        StaircaseSetup.from_stats(stats.path, StaircaseSettings(k=6, prefix_labels=8, attention_windows=4,
                                                                path_windows=1), tokenizer=tokenizer)
    manifest = json.loads((stats.path / "manifest.json").read_text())
    (stats.path / "manifest.json").write_text(json.dumps({**manifest, "version": 0}))
    with pytest.raises(InputError, match="version 0"):
        read_stats(stats.path)
    _refused(_cli("info", str(stats.path), cwd=tmp_path), "version 0")
    # A damaged directory is named where it is read: a manifest that lost a key, arrays cut in half.
    (stats.path / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != "counted"}))
    with pytest.raises(InputError, match=r"manifest\.json has no counted: the file is damaged"):
        read_stats(stats.path)
    (stats.path / "manifest.json").write_text(json.dumps(manifest))
    arrays = (stats.path / "stats.safetensors").read_bytes()
    (stats.path / "stats.safetensors").write_bytes(arrays[: len(arrays) // 2])
    with pytest.raises(InputError, match=r"stats\.safetensors.*damaged"):
        StaircaseSetup.from_stats(stats.path, settings, tokenizer=tokenizer)


def test_bigram_table_is_every_pair_of_consecutive_tokens_of_a_window(tmp_path):
    docs = planted_documents(5)
    path = write_format("flat", docs, tmp_path)
    stats = count_corpus([path], tmp_path / "stats", count="unigram,bigram", unit_tokens=2 * W,
                         **{k: v for k, v in SETTINGS.items() if k != "tokens"})
    pairs = {}
    for w in brute_windows(docs, "joined"):
        for a, b in zip(w[:-1], w[1:]):
            pairs[a * V + b] = pairs.get(a * V + b, 0) + 1
    np.testing.assert_array_equal(stats.array("bigram.keys"), sorted(pairs))
    np.testing.assert_array_equal(stats.array("bigram.counts"), [pairs[key] for key in sorted(pairs)])
    assert stats.counted == ["unigram", "bigram"]
    with pytest.raises(InputError, match="counted without next"):
        stats.require("next")


def test_the_count_defaults_are_the_measurement_defaults():
    from ctxstair.corpus import count
    from ctxstair.measure import analyze_model
    from ctxstair.measure.staircase import StaircaseSettings

    settings = StaircaseSettings()
    expected = (settings.k, settings.prefix_labels, settings.attention_windows, settings.seed)
    assert expected == (count.K, count.PREFIX_LABELS, count.SAMPLE_WINDOWS, count.SEED)
    assert count.WINDOW == analyze_model.WINDOW


def test_each_array_is_stored_in_its_smallest_exact_layout():
    from ctxstair.corpus.stats import compact, expand, smallest_dtype

    assert [smallest_dtype(np.array(v)).name for v in ([0, 255], [256], [2**32], [-1, 127], [-129], [2**40, -1])] \
        == ["uint8", "uint16", "uint64", "int8", "int16", "int64"]
    rng = np.random.default_rng(0)
    mostly_zero = np.where(rng.random((6, 500, 7)) < 0.05, rng.integers(1, 70_000, (6, 500, 7)), 0)
    cases = {"mostly zero": (mostly_zero, "csr"), "full": (rng.integers(1, 300, (40, 9)), "dense"),
             "negative": (rng.integers(-5, 5, 30), "dense"), "empty": (np.zeros((0, 4), np.int64), "dense"),
             "zeros": (np.zeros((3, 5), np.int64), "csr"), "sparse row": (np.eye(1, 500, 3, dtype=np.int64)[0], "csr")}
    for name, (array, layout) in cases.items():
        array = array.astype(np.int64)
        entry, parts = compact(array)
        assert entry["layout"] == layout, name
        assert sum(a.nbytes for a in parts.values()) <= array.astype(smallest_dtype(array)).nbytes, name
        back = expand(json.loads(json.dumps(entry)), parts)  # the entry as the manifest keeps it
        assert back.dtype == np.int64 and np.array_equal(back, array), name
    entry, parts = compact(mostly_zero.astype(np.int64))
    assert entry["stored"] == {"indptr": "uint16", "indices": "uint8", "values": "uint32"}
    with pytest.raises(ValueError, match="do not describe"):
        expand(entry, {**parts, "indices": parts["indices"][:-1]})


def test_the_layout_is_the_one_the_full_csr_sizes_choose():
    """The CSR is built only when its count of nonzero entries allows it to fit; the layout chosen is
    still the one that comparing the full CSR's bytes with the dense bytes gives, on int64 and int32
    arrays whose density, value range and sign put them on both sides of the threshold; each reads
    back as the same values in int64."""
    from ctxstair.corpus.stats import SPARSE_SHARE, compact, csr_parts, expand, smallest_dtype

    rng = np.random.default_rng(1)
    chosen = set()
    for trial in range(400):
        shape = tuple(rng.integers(1, 40, rng.integers(1, 4)))
        low, high = [(1, 3), (1, 300), (1, 70_000), (-200, 200), (-3, 0), (2**31, 2**33)][trial % 6]
        values = rng.integers(low, high, shape)
        dtype = np.int32 if trial // 6 % 2 and high < 2**31 else np.int64
        array = np.where(rng.random(shape) < rng.random() ** 2, values, 0).astype(dtype)
        parts = csr_parts(array.reshape(-1, array.shape[-1]))
        csr_bytes = sum(p.astype(smallest_dtype(p)).nbytes for p in parts)
        expected = "csr" if csr_bytes <= SPARSE_SHARE * array.size * smallest_dtype(array).itemsize else "dense"
        entry, stored = compact(array)
        assert entry["layout"] == expected, (shape, low, high)
        back = expand(json.loads(json.dumps(entry)), stored)
        assert back.dtype == np.int64 and np.array_equal(back, array), (shape, low, high)
        chosen.add((expected, dtype))
    assert chosen == {(layout, dtype) for layout in ("csr", "dense") for dtype in (np.int32, np.int64)}


@pytest.mark.parametrize("window", [1000, 2**30])
def test_unit_counts_are_summed_in_int32_only_where_no_sum_can_overflow_it(window, tmp_path):
    """Two recorded units of one window each (``_sum_units`` loads them as a resumed count does): with
    2 × 1,000 positions their int32 rows are summed in int32; with 2 × 2^30 positions a sum may pass
    2^31 - 1, so it is taken in int64, and one that does is exact."""
    from safetensors.numpy import save_file

    from ctxstair.corpus.count import _sum_units
    from ctxstair.corpus.executors import Executor
    from ctxstair.corpus.units import Job, Unit
    from ctxstair.progress import Progress

    near_limit = np.array([[2**31 - 1, 3]], dtype=np.int32) if window > 1000 else np.array([[999, 3]], np.int32)
    units = [Unit("rows", i, 0, i, i + 1) for i in range(2)]
    for unit, rows in zip(units, (near_limit, np.array([[1, 2]], np.int32))):
        save_file({"next_rows": rows}, str(tmp_path / f"{unit.name}.safetensors"))
        (tmp_path / f"{unit.name}.json").write_text("{}")
    job = Job((), window, "joined", 2)
    with Executor(1, None) as executor, Progress(2 * window, "test", show=False) as bar:
        total = _sum_units(job, units, tmp_path, executor, bar)["next_rows"]
    assert total.dtype == (np.int32 if window == 1000 else np.int64)
    assert total.tolist() == [[int(near_limit[0, 0]) + 1, 5]]


def test_ordinary_pages_turns_numpys_huge_pages_off_only_inside_its_block():
    """ordinary_pages(), which a count and each of its units run inside, is a count's only change to
    its process: numpy's huge-page advice is off inside the block and back to what it was after it,
    also when the block raises."""
    from ctxstair.corpus.units import _set_madvise_hugepage, ordinary_pages

    original = _set_madvise_hugepage(True)
    try:
        for before in (True, False):
            _set_madvise_hugepage(before)
            with ordinary_pages():
                assert _set_madvise_hugepage(False) is False
            assert _set_madvise_hugepage(before) is before
            with pytest.raises(InputError), ordinary_pages():
                raise InputError("bad data")
            assert _set_madvise_hugepage(before) is before
    finally:
        _set_madvise_hugepage(original)


def test_a_manifest_without_storage_or_a_missing_sparse_part_is_named_as_damaged(tmp_path):
    from safetensors.numpy import load_file, save_file

    stats = count_corpus([write_format("flat", planted_documents(), tmp_path)], tmp_path / "stats", **SETTINGS)
    manifest = json.loads((stats.path / "manifest.json").read_text())
    assert manifest["storage"]["prefix_counts"]["layout"] == "csr"
    (stats.path / "manifest.json").write_text(json.dumps({k: v for k, v in manifest.items() if k != "storage"}))
    with pytest.raises(InputError, match=r"manifest\.json has no storage: the file is damaged"):
        read_stats(stats.path)
    (stats.path / "manifest.json").write_text(json.dumps(manifest))
    arrays = load_file(str(stats.path / "stats.safetensors"))
    del arrays["prefix_counts.csr.indices"]
    save_file(arrays, str(stats.path / "stats.safetensors"))
    with pytest.raises(InputError, match=r"stats\.safetensors: 'prefix_counts' cannot be read.*damaged"):
        read_stats(stats.path).array("prefix_counts")

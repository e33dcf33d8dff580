"""A statistics directory replaces the windows in memory everywhere the LM staircase is measured:
``analyze-model --stats``, the monitor built from statistics and an LM run's own analysis give the
numbers of the in-memory path on the same windows."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from lm_helpers import tiny
from repo_paths import ROOT

from ctxstair.corpus import count_corpus, read_stats
from ctxstair.errors import InputError
from ctxstair.lm.train import train_lm
from ctxstair.measure.analyze_model import analyze_model
from ctxstair.measure.schema import UNEMBEDDING_ALIGNMENT
from ctxstair.measure.staircase import StaircaseSettings, StaircaseSetup, run_setup
from ctxstair.monitor import StaircaseMonitor
from ctxstair.run import Run
from ctxstair.text.windows import read_tokenizer


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """A tiny LM run, and its training windows written as a token file and counted with its settings."""
    folder = tmp_path_factory.mktemp("stats")
    out = folder / "run"
    train_lm(tiny(**{"model.n_layers": 2, "train.steps": 10, "analysis.path_windows": 2}), out)
    setup = run_setup(Run(out))
    windows = setup._windows
    np.save(folder / "train.npy", windows.astype(np.uint16).ravel())
    s = setup.settings
    stats = count_corpus([folder / "train.npy"], folder / "stats", tokenizer=read_tokenizer(out),
                         window=windows.shape[1], k=s.k, prefix_labels=s.prefix_labels,
                         attention_windows=s.attention_windows, seed=s.seed, workers=2)
    return out, setup, stats


def as_version_1(stats, folder):
    """The same counts in the layout of statistics version 1: every array dense int64 under its name, no
    ``storage`` in the manifest."""
    from safetensors.numpy import save_file

    folder.mkdir()
    arrays = {name: stats.array(name) for name in stats.manifest["storage"]}
    assert all(a.dtype == np.int64 for a in arrays.values())
    save_file(arrays, str(folder / "stats.safetensors"))
    manifest = {key: value for key, value in stats.manifest.items() if key != "storage"}
    (folder / "manifest.json").write_text(json.dumps({**manifest, "version": 1}))
    return read_stats(folder)


@pytest.fixture(scope="module")
def both_layouts(counted, tmp_path_factory):
    """(the run, the compact directory, the same counts as a version-1 directory)."""
    run, _, stats = counted
    return run, stats, as_version_1(stats, tmp_path_factory.mktemp("v1") / "stats")


def test_the_compact_layout_is_smaller_and_reads_back_the_same_arrays(both_layouts):
    _, new, old = both_layouts
    assert new.manifest["version"] == 2 and old.manifest["version"] == 1
    assert new.manifest["storage"]["prefix_counts"]["layout"] == "csr"
    stored = {dtype for entry in new.manifest["storage"].values() for dtype in entry["stored"].values()}
    assert stored and stored <= {"uint8", "uint16", "uint32"}
    size = {stats: (stats.path / "stats.safetensors").stat().st_size for stats in (new, old)}
    assert size[new] * 5 < size[old]
    for name in new.manifest["storage"]:
        a, b = new.array(name), old.array(name)
        assert a.dtype == b.dtype == np.int64 and np.array_equal(a, b), name
    np.testing.assert_array_equal(new.next_rows(), old.next_rows())


def test_every_consumer_gives_the_same_numbers_from_either_layout(both_layouts, counted):
    run, new, old = both_layouts
    setup = counted[1]
    tokenizer = read_tokenizer(run)
    fields = {f.name: getattr(setup.settings, f.name) for f in dataclasses.fields(StaircaseSettings)}
    setups = [StaircaseSetup.from_stats(stats.path, setup.settings, tokenizer=tokenizer, vocab_size=setup.vocab_size)
              for stats in (new, old)]
    for name in ("tokens", "sample", "sample_indices"):
        np.testing.assert_array_equal(getattr(setups[0], name), getattr(setups[1], name))
    np.testing.assert_array_equal(setups[0].prefix[1], setups[1].prefix[1])
    np.testing.assert_array_equal(setups[0].next_cosines(setup.vocab_size), setups[1].next_cosines(setup.vocab_size))
    model = Run(run).model_at(Run(run).snapshot_times()[-1])
    monitor_fields = {k: v for k, v in fields.items() if k not in ("probe", "paths")}
    measured = [StaircaseMonitor.from_stats(stats.path, tokenizer, vocab_size=setup.vocab_size,
                                            **monitor_fields).measure(model) for stats in (new, old)]
    assert measured[0] == measured[1] and len(measured[0]) > 5
    analysed = [analyze_model(run, stats=stats.path, **fields)["checkpoints"] for stats in (new, old)]
    assert len(analysed[0]) > 1 and json.dumps(analysed[0], sort_keys=True) == json.dumps(analysed[1], sort_keys=True)
    runs = []
    for stats in (new, old):
        copy = Run(run)
        copy.config.analysis.stats = str(stats.path)  # as `lm train --set analysis.stats=DIR` records it
        runs.append(run_setup(copy))
    np.testing.assert_array_equal(runs[0].prefix[1], runs[1].prefix[1])
    np.testing.assert_array_equal(runs[0].next_cosines(setup.vocab_size), runs[1].next_cosines(setup.vocab_size))


def test_semantics_gives_the_same_numbers_from_either_layout(tmp_path):
    from ctxstair.semantics.structure import group_structure_from_stats, word_tokens
    from ctxstair.text.synthetic import SYNTHETIC_GROUPS, synthetic_corpus
    from ctxstair.text.tokenizer import TextTokenizer

    text = synthetic_corpus(1000)
    tokenizer = TextTokenizer.train_bpe(text, 500)
    np.save(tmp_path / "ids.npy", tokenizer.encode(text).astype(np.uint16))
    words = dict.fromkeys(w for group in SYNTHETIC_GROUPS.values() for w in group.words)
    groups = {w: tokens for w in words if (tokens := word_tokens(tokenizer, w))}
    new = count_corpus([tmp_path / "ids.npy"], tmp_path / "stats", tokenizer=tokenizer, window=64,
                       count="unigram,groups", groups=groups, block_tokens=250)
    old = as_version_1(new, tmp_path / "v1")
    options = dict(n_permutations=20, bootstrap=10, seed=1)
    scores = [group_structure_from_stats(stats.path, tokenizer, **options) for stats in (new, old)]
    assert scores[0] == scores[1] and scores[0]["groups"]["weekdays"]["value"] is not None


def test_a_setup_from_statistics_equals_the_setup_from_the_same_windows(counted):
    run, setup, stats = counted
    other = StaircaseSetup.from_stats(stats, setup.settings, tokenizer=read_tokenizer(run), vocab_size=setup.vocab_size)
    np.testing.assert_array_equal(other.tokens, setup.tokens)
    np.testing.assert_array_equal(other.next_cosines(setup.vocab_size), setup.next_cosines(setup.vocab_size))
    np.testing.assert_array_equal(other.prefix[0], setup.prefix[0])
    np.testing.assert_array_equal(other.prefix[1], setup.prefix[1])
    np.testing.assert_array_equal(other.sample, setup.sample)
    assert other.token_strings == setup.token_strings


def test_analyze_model_with_stats_gives_the_in_memory_numbers(counted, tmp_path):
    run, setup, stats = counted
    fields = {f.name: getattr(setup.settings, f.name) for f in dataclasses.fields(StaircaseSettings)}
    in_memory = analyze_model(run)  # its own training windows, its own settings
    from_stats = analyze_model(run, stats=stats.path, out=tmp_path / "series", **fields)
    assert [r["step"] for r in from_stats["checkpoints"]] == [r["step"] for r in in_memory["checkpoints"]]
    for ours, theirs in zip(from_stats["checkpoints"], in_memory["checkpoints"]):
        measures = {k: v for k, v in theirs.items() if isinstance(v, float) and k != UNEMBEDDING_ALIGNMENT}
        assert len(measures) > 5
        for name, value in measures.items():
            assert ours[name] == value, name
        # The statistics hold no previous-token counts over the vocabulary: that measure is left out, not guessed.
        assert UNEMBEDDING_ALIGNMENT in theirs and UNEMBEDDING_ALIGNMENT not in ours
    assert from_stats["corpus"]["tokens"] == stats.manifest["tokens"]
    with pytest.raises(InputError, match="not both"):
        analyze_model(run, "synthetic", stats=stats.path)


def test_the_monitor_built_from_statistics_measures_what_the_one_on_windows_does(counted):
    run, setup, stats = counted
    fields = {f.name: getattr(setup.settings, f.name) for f in dataclasses.fields(StaircaseSettings)}
    on_windows = StaircaseMonitor(setup._windows, setup.tokens, vocab_size=setup.vocab_size, **fields)
    fields.pop("probe"), fields.pop("paths")
    from_stats = StaircaseMonitor.from_stats(stats.path, read_tokenizer(run), vocab_size=setup.vocab_size, **fields)
    model = Run(run).model_at(Run(run).snapshot_times()[-1])
    measured = on_windows.measure(model)
    assert measured.pop(UNEMBEDDING_ALIGNMENT) is not None  # needs the windows: left out from statistics
    assert from_stats.measure(model) == measured


def test_an_lm_run_analysed_on_statistics(counted):
    run, setup, stats = counted
    analysed = Run(run)
    analysed.config.analysis.stats = str(stats.path)  # as `lm train --set analysis.stats=DIR` records it
    with_stats = run_setup(analysed)
    assert with_stats.corpus["stats"] == str(stats.path)
    np.testing.assert_array_equal(with_stats.tokens, setup.tokens)
    np.testing.assert_array_equal(with_stats.prefix[1], setup.prefix[1])
    np.testing.assert_array_equal(with_stats.next_cosines(setup.vocab_size), setup.next_cosines(setup.vocab_size))


def test_shards_of_different_tokenizers_are_refused(counted, tmp_path):
    from ctxstair.corpus import tokenize_files
    from ctxstair.text.tokenizer import TextTokenizer

    (tmp_path / "a.txt").write_text("the cat sat on the mat\nthe dog sat on the log\n" * 30)
    first = TextTokenizer.train_words((tmp_path / "a.txt").read_text(), 300, min_frequency=1)
    second = TextTokenizer.train_words((tmp_path / "a.txt").read_text().replace("cat", "cow"), 300, min_frequency=1)
    a = tokenize_files([tmp_path / "a.txt"], first, tmp_path / "a")
    b = tokenize_files([tmp_path / "a.txt"], second, tmp_path / "b")
    with pytest.raises(InputError, match="different tokenizers"):
        count_corpus([a, b], tmp_path / "stats", tokenizer=first, window=4, k=4)
    with pytest.raises(InputError, match="another tokenizer than the one given"):
        count_corpus([b], tmp_path / "stats", tokenizer=first, window=4, k=4)
    assert not (tmp_path / "stats").exists()
    stats = count_corpus([a], tmp_path / "stats", tokenizer=first, window=4, k=4)
    assert stats.manifest["tokenizer"]["vocab_size"] == first.vocab_size


def test_semantics_from_statistics_equals_semantics_of_the_text(tmp_path):
    from ctxstair.semantics.structure import group_structure, group_structure_from_stats, word_tokens
    from ctxstair.text.synthetic import SYNTHETIC_GROUPS, synthetic_corpus
    from ctxstair.text.tokenizer import TextTokenizer

    text = synthetic_corpus(3000)
    tokenizer = TextTokenizer.train_bpe(text, 600)
    ids = tokenizer.encode(text)
    np.save(tmp_path / "ids.npy", ids.astype(np.uint16))
    words = dict.fromkeys(w for group in SYNTHETIC_GROUPS.values() for w in group.words)
    groups = {w: tokens for w in words if (tokens := word_tokens(tokenizer, w))}
    # One window holding the whole stream: the pairs and blocks of the text itself.
    stats = count_corpus([tmp_path / "ids.npy"], tmp_path / "stats", tokenizer=tokenizer, window=ids.size,
                         count="unigram,groups", groups=groups, block_tokens=250)
    options = dict(n_permutations=50, bootstrap=20, seed=1)
    expected = group_structure(text, tokenizer, block_tokens=250, **options)
    assert group_structure_from_stats(stats.path, tokenizer, **options) == expected
    assert expected["groups"]["weekdays"]["value"] is not None


def test_the_commands_count_describe_and_read_statistics(tmp_path, capsys):
    import json

    from command_helpers import in_process

    from ctxstair.text.synthetic import synthetic_corpus
    from ctxstair.text.tokenizer import TextTokenizer

    text = synthetic_corpus(2000)
    (tmp_path / "corpus.txt").write_text(text)
    tokenizer = TextTokenizer.train_bpe(text, 500)
    tokenizer.save(tmp_path / "tokenizer.json")

    def cli(*args: str) -> str:
        done = in_process(list(args), capsys, tmp_path)
        assert done.returncode == 0, done.stderr
        return done.stdout

    cli("corpus", "tokenize", "corpus.txt", "--tokenizer", "tokenizer.json", "--out", "tokens", "--workers", "2")
    printed = cli("corpus", "count", "tokens.idx", "--tokenizer", "tokenizer.json", "--window", "32", "--k", "20",
                  "--count", "unigram,next,prefix,sample,groups", "--out", "stats")
    assert "counted: unigram, next, prefix, sample, groups" in printed and "M tokens/s" in printed
    info = cli("corpus", "info", "stats")
    assert "megatron" in info and "vocabulary sha256" in info
    cli("semantics", "--stats", "stats", "--tokenizer", "tokenizer.json", "--permutations", "20", "--bootstrap", "5",
        "--out", "semantics")
    written = json.loads((tmp_path / "semantics" / "semantics.json").read_text())
    assert written["n_tokens"] > 0 and set(written["groups"]) >= {"weekdays"}
    assert (tmp_path / "semantics" / "figures" / "semantics.png").is_file()


def documented_commands(heading: str) -> list[list[str]]:
    """The command lines of the first bash block under ``### heading`` in docs/corpora.md."""
    import re
    import shlex

    text = (ROOT / "docs" / "corpora.md").read_text()
    block = re.search(rf"### {re.escape(heading)}\n.*?```bash\n(.*?)```", text, flags=re.S).group(1)
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_the_documented_smollm2_path_runs_as_written(tmp_path, monkeypatch, capsys):
    from model_helpers import save_llama, write_llama_gguf
    from tokenizers import Tokenizer

    from ctxstair.cli import main
    from ctxstair.text.synthetic import synthetic_corpus
    from ctxstair.text.tokenizer import TextTokenizer

    text = synthetic_corpus(1500)
    spec = json.loads(TextTokenizer.train_bpe(text, 400).tokenizer.to_str())
    # SmolLM2's vocabulary holds <|endoftext|>; transformers adds it to a GGUF tokenizer that lacks it.
    spec["model"]["vocab"]["<|endoftext|>"] = len(spec["model"]["vocab"])
    tokenizer = TextTokenizer(Tokenizer.from_str(json.dumps(spec)))
    # A stand-in for the fetched SmolLM2 (never downloaded here): a tiny Llama as a GGUF file with our BPE,
    # where `ctxstair data fetch smollm2` puts it.
    monkeypatch.setenv("CTXSTAIR_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "smollm2").mkdir(parents=True)
    write_llama_gguf(tmp_path / "cache" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf",
                     save_llama(tmp_path / "llama", tokenizer), tokenizer)
    lines = text.splitlines(keepends=True)
    (tmp_path / "work" / "texts" / "more").mkdir(parents=True)
    (tmp_path / "work" / "texts" / "a.txt").write_text("".join(lines[:900]))
    (tmp_path / "work" / "texts" / "more" / "b.txt").write_text("".join(lines[900:]))
    monkeypatch.chdir(tmp_path / "work")
    commands = documented_commands("From text to statistics to a model, with a fetched model's tokenizer")
    assert [command[:3] for command in commands] == [
        ["ctxstair", "data", "fetch"], ["ctxstair", "corpus", "tokenize"], ["ctxstair", "corpus", "count"],
        ["ctxstair", "corpus", "info"], ["ctxstair", "analyze-model", "smollm2"]]
    # The measurement shrunk to test size (4 sampled windows, 20 probe steps); the path is the documented one.
    commands[-1] += ["--windows", "4", "--path-windows", "2", "--probe-steps", "20"]
    for command in commands:
        assert main(command[1:]) == 0, (command, capsys.readouterr().err)
    printed = capsys.readouterr().out
    assert "counted: unigram, next, prefix, sample" in printed and "prefix_counts" in printed
    stats = read_stats("stats/texts")
    assert stats.manifest["tokens"] > 10_000 and stats.manifest["sources"][0]["kind"] == "megatron"
    assert stats.manifest["tokenizer"] == json.loads(Path("tokens/texts.ctxstair.json").read_text())["tokenizer"]
    analysis = json.loads(Path("runs/smollm2-texts/analysis.json").read_text())
    (row,) = analysis["checkpoints"]
    assert row["rho_next"] is not None and row["probe_heldout_mse"] is not None
    assert any(key.startswith("attention_path_corr/") for key in row)

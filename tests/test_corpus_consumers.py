"""A statistics directory replaces the windows in memory everywhere the LM staircase is measured:
``analyze-model --stats``, the monitor built from statistics and an LM run's own analysis give the
numbers of the in-memory path on the same windows."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_lm_train import tiny

from ctxstair.corpus import count_corpus
from ctxstair.errors import InputError
from ctxstair.lm.analyze import analyze_model
from ctxstair.lm.staircase import StaircaseSettings, StaircaseSetup, run_setup
from ctxstair.lm.train import train_lm
from ctxstair.lm.windows import read_tokenizer
from ctxstair.monitor import StaircaseMonitor
from ctxstair.run import Run


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
        measures = {k: v for k, v in theirs.items() if isinstance(v, float)}
        assert len(measures) > 5
        for name, value in measures.items():
            assert ours[name] == value, name
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
    assert from_stats.measure(model) == on_windows.measure(model)


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
    from ctxstair.lm.tokenizer import TextTokenizer

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

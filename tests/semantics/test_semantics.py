"""Corpus semantics (SPEC §7): the synthetic corpus's built-in structure is recovered from its
next-token signatures, against a permutation null and with block-bootstrap intervals; the same
structures in input embeddings; the scores, the silhouette and `ctxstair semantics`."""

import itertools
import json
import math

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from scipy.stats import spearmanr

from ctxstair.cli import main
from ctxstair.errors import InputError
from ctxstair.report.semantics_figures import scores_figure, semantics_figure
from ctxstair.semantics.scores import cyclic_score, ordered_score, permutation_test, silhouette_samples
from ctxstair.semantics.structure import BlockBigramCounts, embedding_structure, group_structure
from ctxstair.semantics.summary import report_markdown, summary_lines
from ctxstair.signatures import next_token_signature
from ctxstair.text.synthetic import SYNTHETIC_GROUPS, WordGroup, synthetic_corpus
from ctxstair.text.tokenizer import TextTokenizer

CATEGORIES = ["colours", "family", "countries", "languages"]


@pytest.fixture(scope="module")
def synthetic():
    text = synthetic_corpus()
    return text, TextTokenizer.train_bpe(text, vocab_size=2000)


@pytest.fixture(scope="module")
def result(synthetic):
    return group_structure(*synthetic)  # defaults: 1000 permutations, B = 200 blocks of 1000 tokens


def test_synthetic_structure_is_recovered(result):
    groups = result["groups"]
    assert groups["numbers"]["value"] >= 0.9          # measured 0.974
    assert groups["weekdays"]["value"] >= 0.7         # measured 1.0
    assert groups["months"]["value"] >= 0.7           # measured 1.0
    assert result["categories"]["silhouette"] > 0.3   # measured 0.68
    for name in CATEGORIES:
        assert groups[name]["value"] > 0.3
    assert all(not entry["missing"] for entry in groups.values())
    assert groups["weekdays"]["chance_closed_form"] == pytest.approx(1 / 3)
    json.dumps(result, allow_nan=False)  # JSON-ready


def test_synthetic_intervals_exclude_chance(result):
    # Every structure of the grammar is recovered with its whole 95 % interval above the
    # permutation chance level, and the point lies inside its interval.
    entries = [result["groups"][name] for name in ["numbers", "weekdays", "months", *CATEGORIES]]
    for entry in [*entries, result["categories"]]:
        low, high = entry["ci"]
        assert entry["chance"] < low <= entry["value"] <= high, entry
        assert entry["p_value"] < 0.01
        assert entry["bootstrap"]["replicates"] == entry["bootstrap"]["defined"] == 200
        assert entry["ci"][0] <= entry["bootstrap"]["mean"] <= entry["ci"][1]
    assert result["bootstrap"]["n_blocks"] == math.ceil((result["n_tokens"] - 1) / 1000)


def test_structure_is_absent_when_the_order_is_scrambled(synthetic):
    text, tokenizer = synthetic
    # Listed in an order the corpus does not follow, the scores fall to chance level or below.
    numbers = SYNTHETIC_GROUPS["numbers"].words
    every_other_day = ("monday", "wednesday", "friday", "sunday", "tuesday", "thursday", "saturday")
    groups = {"numbers": WordGroup(tuple(np.random.default_rng(0).permutation(numbers).tolist()), "ordered"),
              "weekdays": WordGroup(every_other_day, "cyclic")}
    scrambled = group_structure(text, tokenizer, groups, bootstrap=0)["groups"]
    assert scrambled["numbers"]["value"] < 0.3     # measured 0.05
    assert scrambled["numbers"]["p_value"] > 0.1
    assert scrambled["weekdays"]["value"] == 0.0   # no listed pair is adjacent in the corpus's cycle
    assert scrambled["weekdays"]["p_value"] == 1.0
    assert scrambled["weekdays"]["ci"] is None


def test_cyclic_null_mean_is_two_over_n_minus_one(result):
    # Exhaustively: the mean over all 7! listings of 7 points in general position is exactly 2/6.
    rng = np.random.default_rng(1)
    coords = rng.normal(size=(7, 2))
    everything = np.array(list(itertools.permutations(range(7))))
    assert cyclic_score(coords, everything).mean() == pytest.approx(2 / 6, abs=1e-12)
    # Sampled (1000 seeded permutations) inside group_structure, for 7 and 12 words.
    for name, n in [("weekdays", 7), ("months", 12)]:
        entry = result["groups"][name]
        assert entry["chance_closed_form"] == pytest.approx(2 / (n - 1))
        assert entry["chance"] == pytest.approx(2 / (n - 1), abs=0.02)  # SE ≈ 0.005


def test_ordered_null_matches_exhaustive_enumeration(synthetic):
    # E|Spearman| of a random order, by enumerating all n! orders with scipy (an independent code path).
    n = 5
    exact = np.mean([abs(spearmanr(np.arange(n), p).statistic) for p in itertools.permutations(range(n))])
    pc1 = np.random.default_rng(2).normal(size=n)
    everything = np.array(list(itertools.permutations(range(n))))
    assert ordered_score(pc1, everything).mean() == pytest.approx(exact, abs=1e-12)
    assert ordered_score(pc1, np.arange(n)) == pytest.approx(abs(spearmanr(pc1, np.arange(n)).statistic))
    # The sampled null of a 5-word ordered group in group_structure has that mean (SE ≈ 0.01).
    text, tokenizer = synthetic
    five = {"five": WordGroup(("one", "two", "three", "four", "five"), "ordered")}
    entry = group_structure(text, tokenizer, five, bootstrap=0)["groups"]["five"]
    assert entry["chance"] == pytest.approx(exact, abs=0.04)


def test_permutation_p_value_counts_ties_and_adds_one():
    assert permutation_test(0.5, np.array([0.1, 0.5, 0.9, 0.2])) == {"chance": 0.425, "p_value": 3 / 5}
    assert permutation_test(1.0, np.zeros(9))["p_value"] == pytest.approx(0.1)  # never exceeded: 1/(m+1)
    assert permutation_test(None, np.zeros(9)) == {"chance": None, "p_value": None}


def test_block_counts_give_the_next_token_signature(synthetic):
    text, tokenizer = synthetic
    ids = tokenizer.encode(text[:20000])
    rows = [[tokenizer.word_token_id("monday")], [tokenizer.word_token_id("three"), tokenizer.word_token_id("two")]]
    counts = BlockBigramCounts.of_stream(ids, rows, block_tokens=97)
    dense, totals = counts.dense(counts.cells_total)
    phi = next_token_signature(ids[None, :], tokenizer.vocab_size)
    full = np.zeros((2, tokenizer.vocab_size))
    full[:, counts.columns] = dense
    np.testing.assert_allclose(full[0] / totals[0], phi[rows[0][0]])
    pooled = np.bincount(ids[:-1], minlength=tokenizer.vocab_size)[rows[1]]
    np.testing.assert_allclose(full[1] / totals[1], pooled @ phi[rows[1]] / pooled.sum())
    assert counts.n_blocks == math.ceil((ids.size - 1) / 97)
    # A resample of every block once is the corpus itself.
    np.testing.assert_allclose(counts.by_block.sum(axis=0).A1, counts.cells_total)


def test_interval_collapses_when_every_block_is_identical():
    line = "on monday we work . on tuesday they rest . on wednesday you play . on thursday i sing .\n"
    tokenizer = TextTokenizer.train_bpe(line * 5, vocab_size=300)
    block = tokenizer.encode(line)
    text = line * 20 + "on"  # one more token: 20 full blocks of len(block) pairs
    ids = tokenizer.encode(text)
    assert np.array_equal(ids[:-1], np.tile(block, 20))  # the premise: the blocks are identical
    groups = {"days": WordGroup(("monday", "tuesday", "wednesday", "thursday"), "cyclic"),
              "order": WordGroup(("monday", "tuesday", "wednesday", "thursday"), "ordered")}
    out = group_structure(text, tokenizer, groups, bootstrap=50, block_tokens=len(block), n_permutations=100)
    assert out["bootstrap"]["n_blocks"] == 20
    for entry in out["groups"].values():
        assert entry["value"] is not None and entry["ci"] == [entry["value"], entry["value"]]
        assert entry["bootstrap"]["defined"] == 50


def test_missing_and_rare_words_are_reported(synthetic):
    _, tokenizer = synthetic
    text = "after monday comes tuesday .\n" * 3 + "on wednesday we work .\n"
    groups = {"days": WordGroup(("monday", "tuesday", "wednesday", "zzyzx"), "cyclic"),
              "colours": WordGroup(("red", "blue"), "category")}
    out = group_structure(text, tokenizer, groups, min_count=2)
    days = out["groups"]["days"]
    assert days["words"] == ["monday", "tuesday"] and days["counts"] == [3, 3]
    assert days["missing"] == {"wednesday": "occurs 1 times (< 2)", "zzyzx": "not a single token"}
    assert days["value"] is None and "pca" not in days and days["chance"] is None and days["ci"] is None
    assert out["categories"]["silhouette"] is None
    line = summary_lines(out)[1].split()
    assert line[:7] == ["days", "cycle", "neighbours", "recovered", "signatures", "n/a", "n/a"]
    assert line[-3:] == ["n/a", "2/4", "words"]


@pytest.mark.parametrize("bad", [dict(min_count=0), dict(n_permutations=-1), dict(bootstrap=1.5),
                                 dict(block_tokens=0)])
def test_bad_settings_are_refused(synthetic, bad):
    text, tokenizer = synthetic
    with pytest.raises(InputError, match=next(iter(bad))):
        group_structure(text[:1000], tokenizer, **bad)


def _planted_embeddings(tokenizer, rng, structured=True):
    """(V, 8) embeddings: numbers on a line, weekdays and months on circles, categories in clusters."""
    W = rng.normal(scale=0.05, size=(tokenizer.vocab_size, 8))
    if not structured:
        return W
    for name, group in SYNTHETIC_GROUPS.items():
        for i, word in enumerate(group.words):
            t = tokenizer.word_token_id(word)
            if group.kind == "ordered":
                W[t, 0] += i
            elif group.kind == "cyclic":
                angle = 2 * np.pi * i / len(group.words)
                W[t, 1:3] += 3 * np.array([np.cos(angle), np.sin(angle)])
            else:
                W[t, list(SYNTHETIC_GROUPS).index(name)] += 2  # dimensions 3..6, one per category
    return W


def test_embedding_structure_scores_planted_structure(synthetic):
    _, tokenizer = synthetic
    out = embedding_structure(_planted_embeddings(tokenizer, np.random.default_rng(0)), tokenizer)
    groups = out["groups"]
    assert groups["numbers"]["value"] == pytest.approx(1.0)
    assert groups["weekdays"]["value"] == groups["months"]["value"] == 1.0
    assert out["categories"]["value"] > 0.8
    for entry in [*groups.values(), out["categories"]]:
        assert entry["p_value"] < 0.01 and entry["ci"] is None
        low, high = entry["leave_one_out"]
        assert low <= high and entry["chance"] < low
    assert out["dim"] == 8 and all(not entry["missing"] for entry in groups.values())
    json.dumps(out, allow_nan=False)
    # Random embeddings: no structure, so the scores sit near chance.
    noise = embedding_structure(_planted_embeddings(tokenizer, np.random.default_rng(0), structured=False), tokenizer)
    assert noise["categories"]["value"] < 0.1 and noise["categories"]["p_value"] > 0.05
    with pytest.raises(InputError, match="beyond the 10 embedding rows"):
        embedding_structure(np.zeros((10, 4)), tokenizer)


def test_silhouette_matches_its_definition():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(13, 4))
    labels = np.array(list("aaaabbbbbcccd"))
    D = cdist(X, X)
    expected = []
    for i in range(len(X)):
        own = (labels == labels[i]) & (np.arange(len(X)) != i)
        if not own.any():
            expected.append(0.0)  # alone in its cluster
            continue
        a = D[i, own].mean()
        b = min(D[i, labels == other].mean() for other in set(labels) - {labels[i]})
        expected.append((b - a) / max(a, b))
    np.testing.assert_allclose(silhouette_samples(D, labels), expected)
    with pytest.raises(InputError, match="two distinct labels"):
        silhouette_samples(D, np.zeros(13))


def test_figures_have_a_panel_per_structured_group_and_labelled_axes(result, synthetic):
    fig = semantics_figure(result, "synthetic")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert [t.split(":")[0] for t in titles] == ["numbers", "weekdays", "months", "categories"]
    assert all("chance" in t and "95% CI" in t for t in titles)
    assert all(ax.get_xlabel().startswith("PC1 (") for ax in fig.axes if ax.get_title())
    embeddings = embedding_structure(_planted_embeddings(synthetic[1], np.random.default_rng(0)), synthetic[1])
    (ax,) = scores_figure(result, "scores", embeddings).axes
    assert ax.get_xlabel().startswith("score") and ax.get_ylabel() == "word group" and ax.get_title() == "scores"
    assert [t.get_text().split("\n")[0] for t in ax.get_yticklabels()] == [*SYNTHETIC_GROUPS, "categories"]


def test_report_states_each_structure_against_chance(result):
    info = dict(corpus="synthetic", tokenizer="bpe", **result)
    text = report_markdown(info)
    assert ("**numbers (ordered)** — expected: a path in the listed order. "
            "signatures: 0.97 (95 % CI 0.87 to 0.99)") in text
    assert text.count("above chance: the structure holds") == 8


def _run_dir(tmp_path, tokenizer):
    """A minimal LM run directory of this project: config (the default family), tokenizer, one snapshot
    holding the model's input embedding under its ``transformers`` name."""
    import torch

    from ctxstair.run import Run

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("corpus: {}\n")
    tokenizer.save(run / "tokenizer.json")
    W_E = torch.tensor(_planted_embeddings(tokenizer, np.random.default_rng(0)), dtype=torch.float32)
    written = Run(run)
    written.save_snapshot(10, {written.config.model.embedding_key(): W_E})
    return run


def test_semantics_command_writes_json_report_and_figures(tmp_path, capsys, synthetic):
    out = tmp_path / "sem"
    # The corpus's own BPE (2000) is what `semantics synthetic` trains, so the run's tokenizer matches.
    run = _run_dir(tmp_path, synthetic[1])
    assert main(["semantics", "synthetic", "--out", str(out), "--bootstrap", "20", "--permutations", "200",
                 "--model", str(run)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split()[:3] == ["group", "measure", "source"]
    assert printed[1].startswith("numbers") and "|Spearman(PC1, order)|" in printed[1] and "signatures" in printed[1]
    assert printed[2].split()[0] == "embeddings"
    saved = json.loads((out / "semantics.json").read_text())
    assert saved["corpus"] == "synthetic" and saved["groups"]["weekdays"]["value"] >= 0.7
    assert saved["groups"]["weekdays"]["ci"] is not None and saved["bootstrap"]["replicates"] == 20
    assert saved["embeddings"]["checkpoint"] == "step_00000010" and saved["embeddings"]["step"] == 10
    assert saved["embeddings"]["groups"]["numbers"]["value"] == pytest.approx(1.0)
    for figure in ["semantics", "semantics-scores", "semantics-embeddings"]:  # PNG, and SVG beside it by default
        assert (out / "figures" / f"{figure}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / "figures" / f"{figure}.svg").read_bytes().startswith(b"<?xml")
    assert saved["figure_format"] == "svg"
    assert "## Structures" in (out / "report.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "sem"]
    assert main(["semantics", "synthetic", "--out", str(out)]) == 2  # kept unless --force
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("options,message", [
    (["--bootstrap", "-1"], "--bootstrap must be an integer >= 0, got -1"),
    (["--permutations", "-5"], "--permutations must be an integer >= 0"),
    (["--block-tokens", "0"], "--block-tokens must be an integer >= 1"),
    (["--seed", "-1"], "--seed must be an integer >= 0"),
    (["--bootstrap", "x"], "invalid int value: 'x'"),
    (["--model", "no/such/model"], "model 'no/such/model' not found"),
])
def test_semantics_refuses_bad_input_in_one_line(tmp_path, capsys, options, message):
    out = tmp_path / "out"
    try:
        code = main(["semantics", "synthetic", "--out", str(out), *options])
    except SystemExit as exit_:  # argparse's own refusals
        code = exit_.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists()

"""Corpus semantics (SPEC §7): the synthetic corpus's built-in structure is recovered from its
next-token signatures; the scores, the silhouette and `ctxstair semantics`."""

import json

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from ctxstair.cli import main
from ctxstair.errors import InputError
from ctxstair.lm.corpus import SYNTHETIC_GROUPS, WordGroup, synthetic_corpus
from ctxstair.lm.semantics import group_structure, silhouette_samples, summary_lines
from ctxstair.lm.tokenizer import TextTokenizer
from ctxstair.report.semantics_figures import semantics_figure


@pytest.fixture(scope="module")
def synthetic():
    text = synthetic_corpus()
    return text, TextTokenizer.train_bpe(text, vocab_size=2000)


@pytest.fixture(scope="module")
def result(synthetic):
    return group_structure(*synthetic)


def test_synthetic_structure_is_recovered(result):
    groups = result["groups"]
    assert groups["numbers"]["value"] >= 0.9          # measured 0.974
    assert groups["weekdays"]["value"] >= 0.7         # measured 1.0
    assert groups["months"]["value"] >= 0.7           # measured 1.0
    assert result["categories"]["silhouette"] > 0.3   # measured 0.68
    for name in ["colours", "family", "countries", "languages"]:
        assert groups[name]["value"] > 0.3
    assert all(not entry["missing"] for entry in groups.values())
    assert groups["weekdays"]["chance"] == pytest.approx(1 / 3)
    json.dumps(result, allow_nan=False)  # JSON-ready


def test_structure_is_absent_when_the_order_is_scrambled(synthetic):
    text, tokenizer = synthetic
    # Listed in an order the corpus does not follow, the scores fall to chance level or below.
    numbers = SYNTHETIC_GROUPS["numbers"].words
    every_other_day = ("monday", "wednesday", "friday", "sunday", "tuesday", "thursday", "saturday")
    groups = {"numbers": WordGroup(tuple(np.random.default_rng(0).permutation(numbers).tolist()), "ordered"),
              "weekdays": WordGroup(every_other_day, "cyclic")}
    scrambled = group_structure(text, tokenizer, groups)["groups"]
    assert scrambled["numbers"]["value"] < 0.3     # measured 0.05
    assert scrambled["weekdays"]["value"] == 0.0   # no listed pair is adjacent in the corpus's cycle


def test_missing_and_rare_words_are_reported(synthetic):
    _, tokenizer = synthetic
    text = "after monday comes tuesday .\n" * 3 + "on wednesday we work .\n"
    groups = {"days": WordGroup(("monday", "tuesday", "wednesday", "zzyzx"), "cyclic"),
              "colours": WordGroup(("red", "blue"), "category")}
    out = group_structure(text, tokenizer, groups, min_count=2)
    days = out["groups"]["days"]
    assert days["words"] == ["monday", "tuesday"] and days["counts"] == [3, 3]
    assert days["missing"] == {"wednesday": "occurs 1 times (< 2)", "zzyzx": "not a single token"}
    assert days["value"] is None and "pca" not in days  # fewer than 3 words
    assert out["categories"]["silhouette"] is None
    assert summary_lines(out)[0].split() == ["days", "cyclic", "cycle", "neighbours", "recovered", "=", "n/a",
                                             "(2/4", "words)"]


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


def test_figure_has_a_panel_per_structured_group(result):
    fig = semantics_figure(result, "synthetic")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert [t.split(":")[0] for t in titles] == ["numbers", "weekdays", "months", "categories"]
    assert all(ax.get_xlabel().startswith("PC1 (") for ax in fig.axes if ax.get_title())


def test_semantics_command_writes_json_and_figure(tmp_path, capsys):
    out = tmp_path / "sem"
    assert main(["semantics", "synthetic", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("numbers") and "|Spearman(PC1, order)|" in printed[0]
    saved = json.loads((out / "semantics.json").read_text())
    assert saved["corpus"] == "synthetic" and saved["groups"]["weekdays"]["value"] >= 0.7
    assert (out / "figures" / "semantics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sem"]
    assert main(["semantics", "synthetic", "--out", str(out)]) == 2  # kept unless --force
    assert "already exists" in capsys.readouterr().err

"""The recipes on what signatures do for learning: ``signature-embeddings`` (SPEC §8 F8b),
``minmax`` (S72) and ``higher-orders`` (row C), at reduced settings read back from their files;
full-size runs are marked slow."""

import csv
import io
import json

import numpy as np
import pytest
from recipe_helpers import check_report, key, recipe_runner, summary

from ctxstair import rundir, tasks
from ctxstair.recipes import get, run_recipe, write_recipe_report
from ctxstair.recipes.higher_orders import read_order2
from ctxstair.signatures import label_signature
from ctxstair.signatures.superposition import closed_form_signatures, superposition_scores

SMALL = {
    # N = 12, d = 32, 300 epochs, 2 seeds: under gradient descent the trainable model is still on its
    # plateau while the fixed-embedding models learn.
    "signature-embeddings": ({"task.N": 12, "model.d": 32, "train.epochs": 300}, 2),
    "minmax": ({"task.N": 8, "model.d": 32, "train.epochs": 300, "analysis.probe_steps": 20}, None),
    # p = 16 with 8 anchors of shifts 0..7 (1024 sequences), 1500 epochs, one seed, short probes.
    "higher-orders": ({"task.p": 16, "task.shifts": [0, 1, 2, 3, 4, 5, 6, 7], "model.d": 32, "train.epochs": 1500,
                       "snapshots.every": 250, "analysis.probe_steps": 100}, 1),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return recipe_runner(tmp_path_factory.mktemp("signature-recipes"), SMALL)








# ---------------------------------------------------------------- signature-embeddings (F8b)

def test_signature_embeddings_small(runs):
    out = runs("signature-embeddings")
    parts = json.loads((out / "recipe.json").read_text())["parts"]
    assert parts == [f"{o}-{m}" for o in ("gd", "adam") for m in ("signature", "trainable", "random")]
    rows = list(csv.DictReader(io.StringIO((out / "summary.csv").read_text())))
    assert list(rows[0]) == ["optimizer", "lr", "N", "mode", "seed", "epochs_to_95", "early_accuracy",
                             "final_accuracy"]
    assert len(rows) == 12 and {r["seed"] for r in rows} == {"0", "1"}
    # summary.csv agrees with metrics.jsonl
    for r in rows:
        table = rundir.read_metrics(out / f"{r['optimizer']}-{r['mode']}")
        keep = table["member"] == int(r["seed"])
        acc = table["acc"][keep]
        assert float(r["final_accuracy"]) == acc[-1]
        onset = np.flatnonzero(acc >= 0.95)
        assert r["epochs_to_95"] == (str(table["epoch"][keep][onset[0]]) if onset.size else "")
    gd = {r["mode"]: r for r in rows if r["optimizer"] == "gd" and r["seed"] == "0"}
    assert gd["trainable"]["epochs_to_95"] == ""             # on its plateau for the whole budget ...
    assert int(gd["signature"]["epochs_to_95"]) < 300       # ... while the fixed signature embeddings learn
    assert key(out, "gd: (i) signature vs (ii) trainable")["met"] is True
    assert key(out, "gd: (iii) random vs (ii) trainable early")["met"] is True
    assert key(out, "gd: (ii) trainable: epochs to")["met"] is None
    check_report(out, n_figures=1)


# ---------------------------------------------------------------- minmax (S72)

@pytest.mark.parametrize("N", [2, 5, 20])
def test_closed_forms_and_superposition_predictor(N):
    ds = tasks.make("minmax", N=N)
    labels = np.unique(ds.y)
    phi0 = label_signature(ds.X, ds.y, 0, ds.vocab_size, tokens=ds.tokens, labels=labels)
    np.testing.assert_allclose(phi0, closed_form_signatures(N), atol=1e-15)
    score = superposition_scores(ds.X, ds.tokens, phi0)
    brute = np.array([[sum(phi0[list(ds.tokens).index(t), j] for t in x) for j in range(labels.size)] for x in ds.X])
    np.testing.assert_allclose(score, brute, atol=1e-15)
    assert np.array_equal(labels[score.argmax(axis=1)], ds.y)
    top = np.sort(score, axis=1)
    assert np.all(top[:, -1] - top[:, -2] > 1e-9)  # no ties


def test_minmax_small(runs):
    out = runs("minmax")
    assert key(out, "order-0 signatures vs the closed forms")["met"] is True
    assert key(out, "superposition predictor")["measured"].startswith("100.00% (0 ties of 128 samples")
    s = summary(out)
    m = s["members"][0]
    assert s["superposition_accuracy"] == 1.0 and s["weighted_accuracy"] == 1.0
    assert 0 < m["peak_epoch"] < m["last_epoch"] == 300
    assert -1 <= m["corr_peak"] <= 1 and -1 <= m["corr_weighted_end"] <= 1
    assert key(out, "Pearson r of the logits with the superposition score at the end")["met"] is None
    check_report(out, n_figures=4)


# ---------------------------------------------------------------- higher-orders (row C)

def test_higher_orders_small(runs):
    out = runs("higher-orders")
    table = read_order2(out)
    epochs = rundir.snapshot_times(out)
    groups = {f"{name}@{group}" for name in ("order1_probe", "order1_probe_zero_mean", "order2_probe")
              for group in ("context", "anchors")}
    assert set(table["signature"]) == {"order2_probe", "order1_flat", *groups}
    assert np.array_equal(np.unique(table["epoch"]), epochs) and table["defined"].dtype == bool
    m = summary(out)["members"][0]
    assert key(out, "order-0 Pearson with S^(0)")["met"] is True  # the anchors' order-0 signatures are equal
    assert m["peak"] >= 0.9
    # the task tokens are the anchors, so the anchors' own analysis repeats alignment.csv's probe exactly
    main = rundir.alignment_series(rundir.read_alignment(out), "order1_probe", 0)[1]
    assert np.array_equal(main, rundir.alignment_series(table, "order1_probe@anchors", 0)[1], equal_nan=True)
    # shifts 0..7 of p = 16: the anchors' order-1 geometry is a ring, so the flattened one is defined
    assert np.all(table["defined"][table["signature"] == "order1_flat"])
    check_report(out, n_figures=3)
    # the report rebuilds from the files alone
    before = summary(out)
    write_recipe_report(out)
    assert summary(out) == before


def test_recipes_are_registered():
    assert list(get("signature-embeddings").runs())[:3] == ["gd-signature", "gd-trainable", "gd-random"]
    assert get("higher-orders").analyses == ("alignment", "order2")
    assert list(get("minmax").runs()) == [""]


# ---------------------------------------------------------------- full size

@pytest.mark.slow
def test_signature_embeddings_full(tmp_path):
    out = run_recipe("signature-embeddings", tmp_path / "out", progress=False)
    assert key(out, "gd: (i) signature vs (ii) trainable")["met"] is True
    assert key(out, "gd: (iii) random vs (ii) trainable early")["met"] is True
    assert key(out, "adam: (iii) random vs (ii) trainable early")["met"] is True


@pytest.mark.slow
def test_minmax_full(tmp_path):
    out = run_recipe("minmax", tmp_path / "out", progress=False)
    assert summary(out)["superposition_accuracy"] == 1.0
    assert key(out, "trained CBOW: training accuracy at the end")["met"] is True


@pytest.mark.slow
def test_higher_orders_full(tmp_path):
    out = run_recipe("higher-orders", tmp_path / "out", progress=False)
    # Known misses with shifts 0..9 of p = 20 (docs/recipes.md): on the anchors 1 − MSE falls from 1.00
    # to 0.15 and stays (never negative, not ≈ 0), and order 2 adds nothing beyond order 1 (r₂ − r₁
    # between −0.010 and +0.005 over the three seeds).
    for prefix in ("order-0 Pearson with S^(0)", "order-0 1 − MSE: early peak", "order-1 probe on the 10 anchors",
                   "training accuracy"):
        assert key(out, prefix)["met"] is True, prefix

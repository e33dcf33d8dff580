"""The learning recipes (SPEC §8 F8a, F9, App. D: ``ctxstair.recipes.ffn_vs_attention``,
``modulus_onset``, ``seed_spectra``) at reduced sizes, read back from the files they write:
summary.csv, summary.json, metrics.jsonl, alignment.csv and report.html. The F9 rule (medians with
censoring) is also checked on hand-made rows. Full-size runs are marked slow."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from recipe_helpers import check_report, key, recipe_runner, summary

from ctxstair import rundir
from ctxstair.analysis import measures as ms
from ctxstair.recipes import run_recipe
from ctxstair.recipes.modulus_onset import censored_median, onset_part, onset_rule
from ctxstair.run import Run

SMALL = {
    # N = 12: CBOW learns mod within 300 epochs, the attention-only model does not.
    "ffn-vs-attention": ({"task.N": 12, "model.d": 32, "train.epochs": 300, "snapshots.log_points": 8,
                          "snapshots.every": 50, "analysis.probe_steps": 40, "analysis.probe_folds": 3}, 2),
    # N = 6 (divisors 2, 3, 6) and a cap of 60 epochs: some runs learn, others are censored.
    "modulus-onset": ({"task.N": 6, "model.d": 16, "train.epochs": 60}, 2),
    # N = 24 so that k runs to 12 > 10.
    "seed-spectra": ({"task.N": 24, "model.d": 32, "train.epochs": 100, "analysis.probe_steps": 20,
                      "analysis.probe_folds": 2}, 3),
}


@pytest.fixture(scope="module")
def outs(tmp_path_factory):
    return recipe_runner(tmp_path_factory.mktemp("learning-recipes"), SMALL)






def csv_rows(out: Path) -> tuple[list[str], list[dict]]:
    with open(out / "summary.csv", newline="") as handle:
        reader = csv.DictReader(handle)
        return reader.fieldnames, list(reader)


# ---------------------------------------------------------------- ffn-vs-attention (F8a)

def test_ffn_vs_attention_small(outs):
    out = outs("ffn-vs-attention")
    assert json.loads((out / "recipe.json").read_text())["parts"] == ["cbow", "attention"]
    columns, rows = csv_rows(out)
    assert columns == ["model", "member", "seed", "final_accuracy", "epoch_95", "probe_collinear", "probe_end",
                       "probe_zero_mean_end", "aligned_epoch"]
    assert [(r["model"], r["member"], r["seed"]) for r in rows] == [
        ("cbow", "0", "0"), ("cbow", "1", "1"), ("attention", "0", "0"), ("attention", "1", "1")]
    for r in rows:
        run = out / r["model"]
        m = int(r["member"])
        epochs, acc = ms.metric_series(run, m, "acc")
        learned = ms.first_epoch(epochs, acc >= 0.95)
        assert r["epoch_95"] == ("" if learned is None else str(learned))
        assert float(r["final_accuracy"]) == pytest.approx(acc[-1])
        _, probe = rundir.alignment_series(rundir.read_alignment(run), "order1_probe", m)
        assert float(r["probe_end"]) == pytest.approx(probe[-1])
    # at this size CBOW learns mod and the attention-only model does not
    assert all(r["epoch_95"] for r in rows if r["model"] == "cbow")
    assert not any(r["epoch_95"] for r in rows if r["model"] == "attention")
    assert key(out, "CBOW: training accuracy")["met"] is True
    assert key(out, "attention-only: training accuracy")["met"] is True
    # two seeds: too few to judge the attention-only model's chaotic probe
    assert key(out, "attention-only: held-out order-1 probe")["met"] is None
    cbow = [r for r in rows if r["model"] == "cbow"]
    assert key(out, "first epoch with training accuracy")["measured"] == \
        f"{cbow[0]['epoch_95']}, {cbow[1]['epoch_95']} / never, never"
    check_report(out, [f"{float(cbow[0]['final_accuracy']):.3f}", "chance 0.083"], n_figures=2)


# ---------------------------------------------------------------- modulus-onset (F9)

def test_modulus_onset_small(outs):
    out = outs("modulus-onset")
    parts = json.loads((out / "recipe.json").read_text())["parts"]
    assert parts == [onset_part(M) for M in range(2, 21)] and parts[0] == "M02"
    assert not (out / "M04" / "alignment.csv").exists()  # no alignment analysis
    columns, rows = csv_rows(out)
    assert columns == ["M", "seed", "onset_epoch", "M_divides_N", "final_accuracy"]
    assert [(r["M"], r["seed"]) for r in rows] == [(str(M), str(s)) for M in range(2, 21) for s in (0, 1)]
    for r in rows:
        run = out / onset_part(int(r["M"]))
        epochs, acc = ms.metric_series(run, int(r["seed"]), "acc")
        onset = ms.first_epoch(epochs, acc >= 0.95)
        assert r["onset_epoch"] == ("" if onset is None else str(onset))  # censored: an empty field
        assert r["M_divides_N"] == ("true" if 6 % int(r["M"]) == 0 else "false")
    censored = [r for r in rows if r["onset_epoch"] == ""]
    assert censored and len(censored) < len(rows)  # both kinds occur at this size
    assert key(out, "censored runs")["measured"] == f"{len(censored)} of {len(rows)}"

    # the 3× rule, recomputed from summary.csv with censored runs counted as the cap (60)
    def median(flag):
        return float(np.median([60 if r["onset_epoch"] == "" else int(r["onset_epoch"])
                                for r in rows if r["M_divides_N"] == flag]))
    rule = summary(out)["rule"]
    assert rule["median_divides"] == median("true") and rule["median_other"] == median("false")
    assert rule["ratio"] == pytest.approx(median("true") / median("false"))
    assert key(out, "ratio of the two medians")["measured"].split("×")[0].lstrip("≥ ") == f"{rule['ratio']:.1f}"
    assert key(out, "median onset for M | N (M = 2, 3, 6; 6 runs)")
    check_report(out, [f"{rule['ratio']:.1f}×", f"{len(censored)} of {len(rows)}"], n_figures=2)


@pytest.mark.parametrize("div,other,expected", [
    # (onsets for M | N, onsets for the other M, (ratio, met)); the cap is 100
    ([90, 60, 30], [10, 20, 30], (3.0, True)),
    ([50, 60, 70], [20, 30, 40], (2.0, False)),
    ([None, None, 30], [10, 20, 30], (5.0, True)),      # M | N median censored: a lower bound ≥ 3 → met
    ([None, None, 10], [10, 20, 50], (5.0, True)),
    ([None, None, 10], [40, 50, 60], (2.0, None)),      # a lower bound below 3: cannot tell
    ([None, None, None], [None, None, 60], (1.0, None)),  # the other M's median is censored: not judged
    ([90, 90, 90], [None, 10, 20], (4.5, True)),        # a censored run above the median does not matter
])
def test_onset_rule_with_censoring(div, other, expected):
    rows = [dict(M=4, seed=s, onset_epoch=o, M_divides_N=True) for s, o in enumerate(div)]
    rows += [dict(M=3, seed=s, onset_epoch=o, M_divides_N=False) for s, o in enumerate(other)]
    rule = onset_rule(rows, cap=100)
    assert (rule["ratio"], rule["met"]) == (pytest.approx(expected[0]), expected[1])
    assert rule["censored"] == sum(o is None for o in div + other)


def test_censored_median():
    assert censored_median([10, 20, None], 100) == (20.0, False)
    assert censored_median([10, None, None], 100) == (100.0, True)
    assert censored_median([10, 30, None, None], 100) == (65.0, True)


# ---------------------------------------------------------------- seed-spectra (App. D)

@pytest.mark.parametrize("task", ["add", "mod"])
def test_seed_spectra_small(outs, task):
    out = outs("seed-spectra")
    run = out / task
    columns, rows = csv_rows(out)
    assert columns == ["task", "seed", "k_star", "r_star", "partial_r_star", "null_p", "partial_null_p", "accuracy"]
    assert [r["task"] for r in rows] == ["add"] * 3 + ["mod"] * 3
    rows = [r for r in rows if r["task"] == task]
    assert [r["seed"] for r in rows] == ["0", "1", "2"]
    assert Run(run).config.model.activation == {"add": "relu", "mod": "tanh"}[task]
    table = rundir.read_alignment(run)
    last = rundir.snapshot_times(run)[-1]
    assert rundir.snapshot_times(run) == [0, 100]
    for m, r in enumerate(rows):
        # k* = argmax over k > 10 of alignment.csv's fourier_k<k> rows at the last snapshot
        scores = {k: ms.value_at(*rundir.alignment_series(table, f"fourier_k{k}", m), last) for k in range(0, 13)}
        searched = {k: v for k, v in scores.items() if k > 10}
        assert int(r["k_star"]) == max(searched, key=searched.get)
        assert float(r["r_star"]) == pytest.approx(searched[int(r["k_star"])])
        assert float(r["accuracy"]) == pytest.approx(ms.metric_series(run, m, "acc")[1][-1])
        if task == "mod":  # every order-0 signature is equal: nothing to partial out
            assert float(r["partial_r_star"]) == pytest.approx(float(r["r_star"]))
    # the chance level of k*: the best Fourier alignment over k > 10 with the tokens relabelled, written out
    sigs = rundir.read_signatures(run)
    W = rundir.load_snapshot(run, last)["W_E"][:, sigs.tokens].astype(np.float64)
    phi1 = sigs.orders[1]
    upper = np.triu_indices(sigs.tokens.size, 1)

    def cosines(M):
        unit = M / np.linalg.norm(M, axis=1, keepdims=True)
        return unit @ unit.T

    views = [cosines(phi1 @ np.cos(2 * np.pi * k * np.arange(phi1.shape[2]) / phi1.shape[2])) for k in (11, 12)]
    rng = np.random.default_rng(0)
    permutations = [rng.permutation(sigs.tokens.size) for _ in range(200)]
    S0 = cosines(sigs.orders[0])
    order0_varies = np.ptp(S0[upper]) > 1e-9

    def partial(a, b):
        """Pearson of a with b controlling for S0's triangle (plain Pearson when S0 is constant)."""
        r_ab = np.corrcoef(a, b)[0, 1]
        if not order0_varies:
            return r_ab
        r_a0, r_b0 = np.corrcoef(a, S0[upper])[0, 1], np.corrcoef(b, S0[upper])[0, 1]
        return (r_ab - r_a0 * r_b0) / np.sqrt((1 - r_a0**2) * (1 - r_b0**2))

    for m, r in enumerate(rows):
        S = cosines(W[m])
        null = [max(np.corrcoef(S[np.ix_(p, p)][upper], view[upper])[0, 1] for view in views) for p in permutations]
        assert float(r["null_p"]) == pytest.approx((1 + sum(v >= float(r["r_star"]) for v in null)) / 201)
        partial_null = [max(partial(S[np.ix_(p, p)][upper], view[upper]) for view in views) for p in permutations]
        assert float(r["partial_null_p"]) == pytest.approx(
            (1 + sum(v >= float(r["partial_r_star"]) for v in partial_null)) / 201)
    distinct = sorted({int(r["k_star"]) for r in rows})
    assert key(out, f"{task}: distinct k*")["measured"].startswith(f"{len(distinct)} of 3 ")
    assert key(out, f"{task}: distinct k*")["met"] is (len(distinct) == 3)  # every seed its own k*
    first = rows[0]
    check_report(out, [f"seed 0: {first['k_star']} ({float(first['r_star']):.2f}; "
                       f"{float(first['partial_r_star']):.2f})"],
                 n_figures=4)


def test_best_frequency_k_min():
    ks = np.arange(6)
    values = np.array([0.9, 0.8, 0.1, np.nan, 0.3, 0.2])
    assert ms.best_frequency(ks, values) == (1, 0.8)
    assert ms.best_frequency(ks, values, k_min=3) == (4, 0.3)


# ---------------------------------------------------------------- full size (opt-in)

#: Key numbers (name prefixes) known not to be met at the defaults (docs/recipes.md): in seed-spectra, 10 seeds
#: of add give 6 distinct k* (k = 20 and k = 17 three times each), not one per seed, and only 2 of the 10
#: best alignments beat their permutation null; 10 seeds of mod give 6 distinct k*, each above chance.
KNOWN_MISSES = {"seed-spectra": ("add: distinct k* over the seeds", "add: k* above chance",
                                 "mod: distinct k* over the seeds")}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ffn-vs-attention", "modulus-onset", "seed-spectra"])
def test_learning_recipe_at_full_size(tmp_path, name):
    """The defaults of each recipe: every judged key number is met except the known misses, and the
    F9 ratio is judged (not left open by censoring)."""
    out = run_recipe(name, tmp_path / name, progress=False)
    keys = summary(out)["key_numbers"]
    misses = KNOWN_MISSES.get(name, ())
    assert [k["name"] for k in keys if k["met"] is False and not k["name"].startswith(misses)] == []
    if name == "modulus-onset":
        assert summary(out)["rule"]["met"] is True

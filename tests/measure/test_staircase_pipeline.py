"""The one LM staircase measurement (ctxstair.measure.staircase, SPEC §6.4, §7): our runs' analysis,
``analyze-model`` and the monitor give the same measures under the same names, from one setup that
can also be built from counts made elsewhere, with one set of defaults."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from lm_helpers import tiny

from ctxstair.cli import analyze_model as analyze_model_cli
from ctxstair.lm.train import train_lm
from ctxstair.measure import schema
from ctxstair.measure.analyze_model import analyze_model
from ctxstair.measure.estimators import States
from ctxstair.measure.schema import UNEMBEDDING_ALIGNMENT
from ctxstair.measure.staircase import StaircaseSettings, StaircaseSetup, run_setup
from ctxstair.monitor import StaircaseMonitor
from ctxstair.report.lm_series import analysis_series, run_series
from ctxstair.run import Run
from ctxstair.signatures import NextTokenCounts, prefix_counts


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """A tiny LM run of two layers, analysed as `lm train` does (every measure at every snapshot)."""
    from ctxstair.analysis import analyse

    out = tmp_path_factory.mktemp("lm") / "run"
    train_lm(tiny(**{"model.n_layers": 2, "train.steps": 20, "analysis.path_windows": 3}), out)
    analyse(out, ["lm_staircase"])
    return out


def test_the_run_analyze_model_and_the_monitor_give_the_same_numbers_under_the_same_names(lm_run, tmp_path):
    run = Run(lm_run)
    final = run.snapshot_times()[-1]
    # analyze-model on the run directory: its own training windows and its own analysis settings.
    result = analyze_model(lm_run, out=tmp_path / "analysed")
    analysed = analysis_series(tmp_path / "analysed")
    # The monitor on the final model, built from the same windows with the same settings.
    setup = run_setup(run)
    settings = {f.name: getattr(setup.settings, f.name) for f in dataclasses.fields(StaircaseSettings)}
    monitor = StaircaseMonitor(setup._windows, setup.tokens, vocab_size=setup.vocab_size, **settings)
    live = monitor.measure(run.model_at(final))
    ours = run_series(lm_run)
    names = set(live)
    # Every measure of the schema is there, under one set of names, in all three.
    assert {schema.split_key(name)[0] for name in names} == set(schema.MEASURES)
    assert names == {name for name in ours.values} == {name for name in analysed.values}
    assert schema.parts(names, schema.ATTENTION_CORR) == ["0", "1"]
    assert schema.parts(names, schema.PATH_SHARE) == ["embed", "attn.0", "mlp.0", "attn.1", "mlp.1"]
    assert [row["step"] for row in result["checkpoints"]] == run.snapshot_times()
    fitted = {schema.PROBE, schema.SHUFFLED}
    for name, value in live.items():
        at_final = analysed.values[name][-1]
        # analyze-model and the monitor both fit one snapshot at a time: the same arithmetic.
        assert abs(value - at_final) <= 1e-9, name
        # The run's own analysis fits every snapshot at once (one float32 optimisation of another shape):
        # the probe then differs by rounding (6e-8 measured here), which Adam can carry into another
        # local optimum on longer fits; every other measure is the same arithmetic.
        assert abs(value - ours.values[name][-1]) <= (1e-3 if name in fitted else 1e-9), name
    # Not a trivial agreement: finite numbers of a model that moved from its initialization.
    assert np.isfinite(list(live.values())).all()
    assert all(ours.values[name][0] != ours.values[name][-1] for name in (schema.RHO_NEXT, schema.PROBE))


def test_a_setup_from_counts_equals_the_setup_from_windows(lm_run):
    setup = run_setup(Run(lm_run))
    windows, V = setup._windows, setup.vocab_size
    counted = NextTokenCounts(V, tokens=setup.tokens)
    half = len(windows) // 2  # counted in two parts and summed, as shards are
    labels = setup.prefix_labels
    parts = [prefix_counts(piece, setup.tokens, labels, setup.tokens) for piece in (windows[:half], windows[half:])]
    for piece in (windows[:half], windows[half:]):
        counted.add(piece)
    pairs = counted._pairs.reshape(setup.tokens.size + 1, V + 1)[:-1, :-1]
    other = StaircaseSetup.from_counts(setup.tokens, pairs, setup.sample, settings=setup.settings,
                                       prefix_labels=labels, prefix_counts=parts[0][0] + parts[1][0],
                                       sample_indices=setup.sample_indices)
    np.testing.assert_array_equal(other.next_cosines(V), setup.next_cosines(V))
    np.testing.assert_array_equal(other.prefix[1], setup.prefix[1])
    W = np.random.default_rng(0).normal(size=(2, setup.tokens.size, 16))
    model = Run(lm_run).model_at(0, torch.float32)
    states = States(V, W, model=lambda i: model)
    counted_rows, window_rows = other.measure(states), setup.measure(states)
    # The unembedding alignment needs the previous-token signature over the whole vocabulary, which the
    # counts do not hold: a setup from counts leaves it out rather than estimate it from the sample.
    assert all(UNEMBEDDING_ALIGNMENT in row and UNEMBEDDING_ALIGNMENT not in counted
               for row, counted in zip(window_rows, counted_rows))
    without = [{name: v for name, v in row.items() if name != UNEMBEDDING_ALIGNMENT} for row in window_rows]
    assert counted_rows == without
    assert other.record()["prefix_labels"] == labels.size


def test_one_set_of_defaults():
    # StaircaseSettings takes its defaults from LMAnalysisConfig; the command line repeats them for its
    # help (it loads no torch), so they are checked here.
    defaults = StaircaseSettings()
    # The command line states them without importing torch.
    cli = analyze_model_cli
    stated = (cli.DEFAULT_K, cli.DEFAULT_PREFIX_LABELS, cli.DEFAULT_WINDOWS, cli.DEFAULT_PATH_WINDOWS)
    assert stated == (defaults.k, defaults.prefix_labels, defaults.attention_windows, defaults.path_windows)
    from ctxstair.measure import analyze_model

    assert (analyze_model_cli.DEFAULT_WINDOW, analyze_model_cli.DEFAULT_MAX_TOKENS) == (analyze_model.WINDOW,
                                                                                      analyze_model.MAX_TOKENS)


def test_the_schema_names_round_trip_through_the_table_and_the_log_keys():
    rows = [{"rho_next": 0.5, "attention_path_corr/0": 0.1, "path_share/attn.1": 0.2},
            {"rho_next": float("nan"), "probe_heldout_mse": 0.03}]
    table = schema.table_rows([0, 7], rows)
    assert table[1] == {"step": 0, "measure": "attention_path_corr", "part": "0", "value": 0.1}
    assert [schema.key(r["measure"], r["part"]) for r in table] == [*rows[0], *rows[1]]
    series = schema.series(rows)
    assert np.isnan(series["probe_heldout_mse"][0]) and series["probe_heldout_mse"][1] == 0.03
    assert schema.LOG_PREFIX + schema.key(schema.PATH_SHARE, "embed") == "staircase/path_share/embed"
    assert json.loads(json.dumps(schema.MEASURES)) == list(schema.MEASURES)

"""Exact gradient flow (SPEC §5 "Training"): ``train.optimizer=flow`` in the engine, its
configuration checks, resume semantics, and the distance between gradient descent and the flow."""

import json

import numpy as np
import pytest
import torch
from recipe_helpers import run_contents as contents

from ctxstair import rundir, tasks
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.errors import InputError
from ctxstair.models import build_ensemble
from ctxstair.theory.flow import gd_flow_distance
from ctxstair.train import engine, member_losses, snapshot_schedule, train_run

EPOCHS = 30
# tanh: a smooth vector field, so the adaptive solver takes few steps (ReLU's kinks cost many more,
# docs/recipes.md); lr 1: epoch e is flow time t = e.
BASE = {"task.N": 8, "model.d": 32, "model.activation": "tanh", "train.optimizer": "flow", "train.lr": 1.0,
        "train.epochs": EPOCHS, "snapshots.every": 10, "analysis.enabled": False}
SCHEDULE = snapshot_schedule(EPOCHS, 16, 10)


def config(**overrides) -> RunConfig:
    return apply_overrides(RunConfig(), {**BASE, **{k.replace("__", "."): v for k, v in overrides.items()}})


def metric_rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def stop_at(epoch):
    def hook(e):
        if e == epoch:
            raise KeyboardInterrupt
    return hook


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return contents(train_run(config(), tmp_path_factory.mktemp("flow") / "ref", progress=False))


# ---------------------------------------------------------------- configuration

@pytest.mark.parametrize("overrides,needle", [
    ({"train.batch_size": 16}, "train.batch_size must be 0"),
    ({"train.momentum": 0.9}, "train.momentum must be 0"),
    ({"train.flow_rtol": 0}, "train.flow_rtol must be > 0"),
    ({"train.flow_atol": -1e-9}, "train.flow_atol must be > 0"),
    ({"train.flow_method": "euler"}, "train.flow_method must be one of dopri5"),
])
def test_flow_refuses_minibatches_and_bad_settings(overrides, needle):
    with pytest.raises(InputError, match=needle):
        apply_overrides(RunConfig(), {"train.optimizer": "flow", **overrides})


def test_flow_defaults_are_documented_values():
    cfg = apply_overrides(RunConfig(), {"train.optimizer": "flow"})
    assert (cfg.train.flow_rtol, cfg.train.flow_atol, cfg.train.flow_method) == (1e-6, 1e-8, "dopri5")
    assert apply_overrides(RunConfig(), {"train.optimizer": "sgd", "train.batch_size": 16}).train.batch_size == 16


def test_flow_refusal_from_the_command_line(tmp_path, capsys):
    from ctxstair.cli import main

    code = main(["run", "staircase-add", "--out", str(tmp_path / "x"), "--set", "train.optimizer=flow",
                 "--set", "train.batch_size=64"])
    assert code == 2 and "train.batch_size must be 0" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# ---------------------------------------------------------------- the engine under flow

def test_flow_run_directory_and_epoch_semantics(tmp_path, reference):
    """Same files as any run; epoch 0 is the initialization; the loss never increases along a
    gradient flow; a snapshot's parameters reproduce the logged loss of its epoch."""
    cfg = config()
    run = tmp_path / "run"
    train_run(cfg, run, progress=False)
    assert contents(run) == reference  # deterministic
    assert rundir.snapshot_times(run) == SCHEDULE and not (run / "checkpoint").exists()
    rows = metric_rows(run)
    loss = [r["loss"] for r in rows]
    assert [r["epoch"] for r in rows] == list(range(EPOCHS + 1))
    assert all(b <= a + 1e-6 for a, b in zip(loss, loss[1:])) and loss[-1] < loss[0] - 0.1
    dataset = tasks.make("add", N=8)
    model = build_ensemble(cfg, dataset)
    assert np.array_equal(rundir.load_snapshot(run, 0)["W_E"], model.W_E.detach().numpy())
    X, y = torch.from_numpy(dataset.X), torch.from_numpy(dataset.y)
    for epoch in (1, 10, EPOCHS):
        snap = rundir.load_snapshot(run, epoch)
        with torch.no_grad():
            model.W_E.copy_(torch.from_numpy(snap["W_E"]))
            model.W_U.copy_(torch.from_numpy(snap["W_U"]))
            assert float(member_losses(model, X, y)[0][0]) == pytest.approx(rows[epoch]["loss"], rel=1e-6)


@pytest.mark.parametrize("stop", [0, 1, 8, 13, 20, EPOCHS])
def test_flow_resume_after_interruption_is_bitwise_identical(tmp_path, reference, stop):
    cfg, run = config(), tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        train_run(cfg, run, hook=stop_at(stop), progress=False)
    if stop > 0:
        last = max(e for e in SCHEDULE if e < stop)
        assert json.loads((run / "checkpoint" / "state.json").read_text())["epoch"] == last
    train_run(cfg, run, resume=True, progress=False)
    assert contents(run) == reference


def test_gradient_flow_integrates_between_the_given_times():
    """Integrating [0, 2] in one call or as [0, 1] then [1, 2] agrees to the solver's tolerance, and
    integrating an interval of length 0 changes nothing."""
    cfg = config(train__dtype="float64")
    dataset = tasks.make("add", N=8)
    X, y = torch.from_numpy(dataset.X), torch.from_numpy(dataset.y)
    one, two = build_ensemble(cfg, dataset), build_ensemble(cfg, dataset)
    before = one.W_E.detach().clone()
    assert engine.gradient_flow(one, X, y, 3.0, 3.0, rtol=1e-10, atol=1e-12) >= 0
    assert torch.equal(one.W_E.detach(), before)
    engine.gradient_flow(one, X, y, 0.0, 2.0, rtol=1e-10, atol=1e-12)
    engine.gradient_flow(two, X, y, 0.0, 1.0, rtol=1e-10, atol=1e-12)
    engine.gradient_flow(two, X, y, 1.0, 2.0, rtol=1e-10, atol=1e-12)
    scale = float(one.W_E.detach().abs().max())
    assert torch.allclose(one.W_E.detach(), two.W_E.detach(), rtol=0, atol=1e-8 * scale)
    assert not torch.equal(one.W_E.detach(), before)


# ---------------------------------------------------------------- gradient descent → flow

def test_gd_flow_distance_shrinks_linearly_with_lr():
    """GD is first order: at a fixed flow time T = 8, halving lr (and doubling the epochs) halves
    ||θ_GD − θ_flow|| / ||θ_flow||."""
    T, distances = 8.0, []
    for epochs in (8, 16, 32):
        cfg = config(train__lr=T / epochs, train__members=2)
        out = gd_flow_distance(cfg, epochs)
        assert out["epoch"].tolist() == list(range(epochs + 1))
        assert out["t"][-1] == pytest.approx(T)
        assert out["distance"][0] == 0 and (out["distance"][1:] > 0).all()
        assert out["member_distance"].shape == (2, epochs + 1) and out["loss_flow"].shape == (2, epochs + 1)
        assert out["flow_evaluations"] > epochs
        distances.append(out["distance"][-1])
    ratios = [a / b for a, b in zip(distances, distances[1:])]
    assert all(1.7 <= r <= 2.3 for r in ratios), (distances, ratios)
    assert distances[-1] < 0.05

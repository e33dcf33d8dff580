"""Numerical faults: a NaN or Inf in the loss or the parameters stops the run with
one line naming the epoch (or step), the member and tensor, and the likely cause; what was written
up to then is kept, `failure.json` says why, and the report is marked as failed."""

import json

import pytest
import torch

from ctxstair.cli import main
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.errors import TrainingDiverged
from ctxstair.train import engine, train_run

SMALL = ["--set", "task.N=8", "--set", "model.d=16", "--set", "train.epochs=50", "--set", "snapshots.log_points=4",
         "--set", "snapshots.every=10"]


def test_a_learning_rate_far_too_large_stops_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "staircase-add", "--set", "train.lr=1e9", *SMALL, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("ctxstair: run failed: training diverged at epoch ")
    assert "the learning rate train.lr=1e+09 (gd) is likely too large" in err
    failure = json.loads((out / "failure.json").read_text())
    assert failure["reason"] == "diverged" and failure["members"] == [0]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["epoch"] == failure["epoch"] and metrics[-1]["loss"] != metrics[-1]["loss"]  # NaN last
    assert all(row["loss"] == row["loss"] for row in metrics[:-1])  # finite before
    assert not (out / "checkpoint").exists() and (out / "snapshots" / "epoch_00000000.safetensors").is_file()
    html = (out / "report.html").read_text()
    assert f"FAILED: training diverged at epoch {failure['epoch']}" in html and "✗" in html
    assert not (out / "alignment.csv").exists()
    assert main(["verify", str(out)]) == 0
    assert "stopped on a numerical fault" in capsys.readouterr().out


def test_the_member_and_tensor_that_went_bad_are_named(tmp_path, monkeypatch):
    """An Inf written into member 1's W_U after the update of epoch 5 (as an overflow would):
    the run stops at epoch 6 and names member 1 and W_U, not member 0 or W_E."""
    built, step = [], engine.full_batch_step

    def build(cfg, dataset):
        built.append(engine_build(cfg, dataset))
        return built[-1]

    def poisoned(optimizer):
        result = step(optimizer)
        poisoned.calls += 1
        if poisoned.calls == 6:
            with torch.no_grad():
                built[0].W_U[1, 0, 0] = float("inf")
        return result

    engine_build, poisoned.calls = engine.build_ensemble, 0
    monkeypatch.setattr(engine, "build_ensemble", build)
    monkeypatch.setattr(engine, "full_batch_step", poisoned)
    cfg = apply_overrides(RunConfig(), {"task.N": 6, "model.d": 8, "train.epochs": 20, "train.members": 2})
    with pytest.raises(TrainingDiverged, match=r"epoch 6: the loss of member\(s\) \[1\] is not finite; "
                                               r"non-finite values in W_U \(members \[1\]\)") as failure:
        train_run(cfg, tmp_path / "run", progress=False)
    assert failure.value.run_dir == tmp_path / "run"
    assert json.loads((tmp_path / "run" / "failure.json").read_text())["tensors"] == {"W_U": [1]}


def test_a_diverging_language_model_stops_at_its_step(tmp_path, capsys):
    out = tmp_path / "lm"
    args = ["--set", "model.d_model=16", "--set", "model.n_layers=1", "--set", "model.n_heads=2",
            "--set", "model.head_dim=8", "--set", "model.d_mlp=32", "--set", "corpus.window=16",
            "--set", "corpus.vocab_size=300", "--set", "corpus.max_tokens=20000", "--set", "train.steps=30",
            "--set", "train.batch_size=8", "--set", "train.lr=1e6", "--set", "snapshots.every=10"]
    assert main(["lm", "train", *args, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ctxstair: run failed: training diverged at step ") and err.count("\n") == 1
    assert "train.lr=1e+06" in err
    failure = json.loads((out / "failure.json").read_text())
    assert "FAILED: training diverged at step" in (out / "report.html").read_text()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in rows) == failure["step"]
    assert not (out / "checkpoint").exists()

"""Data-parallel language-model training and the device choice (item 5): two CPU
processes under torchrun (gloo) reproduce the single-process run — loss curve, snapshot steps,
weights — within float32 rounding; resume under torchrun; bad device and batch settings exit 2."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from repo_paths import SRC

from ctxstair import rundir
from ctxstair.cli import main
from ctxstair.config import apply_overrides
from ctxstair.config.lm import LMConfig
from ctxstair.lm.train import train_lm
from ctxstair.run import Run

TINY = {"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2, "model.head_dim": 8, "model.d_mlp": 32,
        "corpus.window": 16, "corpus.vocab_size": 300, "corpus.max_tokens": 20000, "train.steps": 30,
        "train.batch_size": 8, "train.lr": 1e-2, "snapshots.log_points": 4, "snapshots.every": 10}

# The two processes compute each slice's mean loss and average them (losses and gradients), where one
# process takes one mean over the batch: the float32 sums are ordered differently. Measured on this
# model over 30 steps, train.seed 0–3: training and held-out losses (≈ 4.5) differ by at most 9.5e-7
# (1.4e-6 with the project's former decoder); the tolerance is about 7–10 times that. The weights
# drift further apart than the losses (AdamW's normalised step carries the rounding of the query and
# key weights' small gradients on: at seed 0, 5 % of the layer-0 query entries differ by more than
# 2e-6, up to 2.6e-5), so they are compared with the run that makes the same sums in one process:
# two micro-batches of the same halves. That run and the two ranks are equal bit for bit (the sum of
# two gradients does not depend on their order, and halving is exact).
LOSS_TOL = 1e-5


def settings(**extra) -> list[str]:
    return sum((["--set", f"{k}={v}"] for k, v in {**TINY, **extra}.items()), [])


def torchrun(*args: str) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --nproc_per_node=2 --standalone -m ctxstair lm train ARGS``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
                           "-m", "ctxstair", "lm", "train", "--no-analysis", *args],
                          env=env, capture_output=True, text=True, timeout=120)


def assert_same_run(single: Path, parallel: Path) -> None:
    """Same snapshot steps and logged steps; losses within LOSS_TOL of the single-process run's."""
    assert rundir.snapshot_times(parallel) == rundir.snapshot_times(single)
    rows_1, rows_2 = rundir.read_metric_rows(single), rundir.read_metric_rows(parallel)
    assert [sorted(r) + [r["step"]] for r in rows_2] == [sorted(r) + [r["step"]] for r in rows_1]
    for r1, r2 in zip(rows_1, rows_2):
        assert r2.get("loss", 0) == pytest.approx(r1.get("loss", 0), abs=LOSS_TOL)
        assert r2.get("val_loss", 0) == pytest.approx(r1.get("val_loss", 0), abs=LOSS_TOL)
        assert r2.get("lr") == r1.get("lr")


def assert_bitwise_equal(first: dict, second: dict) -> None:
    assert first.keys() == second.keys()
    assert all(torch.equal(first[name], second[name]) for name in first), \
        [name for name in first if not torch.equal(first[name], second[name])]


@pytest.mark.extended  # two-process jobs
def test_two_process_ddp_reproduces_the_single_process_run(tmp_path):
    single = tmp_path / "single"
    assert main(["lm", "train", "--no-analysis", "--out", str(single), *settings()]) == 0
    result = torchrun("--out", str(tmp_path / "ddp"), *settings())
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_run(single, tmp_path / "ddp")
    halves = tmp_path / "halves"  # the two ranks' sums, in one process
    assert main(["lm", "train", "--no-analysis", "--out", str(halves), *settings(**{"train.micro_batches": 2})]) == 0
    for step in rundir.snapshot_times(single):
        assert_bitwise_equal(Run(halves).snapshot(step), Run(tmp_path / "ddp").snapshot(step))
    # Only rank 0 wrote: exactly the files of a single-process run, and the report.
    assert sorted(p.name for p in (tmp_path / "ddp").iterdir()) == sorted(p.name for p in single.iterdir())
    assert json.loads((tmp_path / "ddp" / "summary.json").read_text()).keys() == json.loads(
        (single / "summary.json").read_text()).keys()

    # Resume under torchrun from a checkpoint written by one process: both ranks load it.
    def stop_at_17(step):
        if step == 17:
            raise KeyboardInterrupt
    cfg = apply_overrides(LMConfig(), {**TINY, "analysis.enabled": False})
    with pytest.raises(KeyboardInterrupt):
        train_lm(cfg, tmp_path / "resumed", hook=stop_at_17)
    result = torchrun("--out", str(tmp_path / "resumed"), "--resume", *settings())
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_run(single, tmp_path / "resumed")
    for step in (0, 1, 2, 5, 10):  # written by the one process before it stopped: its own steps, bit for bit
        assert_bitwise_equal(Run(single).snapshot(step), Run(tmp_path / "resumed").snapshot(step))


@pytest.mark.extended  # two-process jobs
def test_a_batch_that_does_not_split_evenly_is_refused(tmp_path):
    result = torchrun("--out", str(tmp_path / "ddp"), *settings(**{"train.batch_size": 7}))
    assert result.returncode != 0
    assert "train.batch_size=7 is not divisible by the 2 data-parallel processes" in result.stderr
    assert not (tmp_path / "ddp").exists()


def test_device_choice(tmp_path, capsys):
    out = tmp_path / "lm"
    assert main(["lm", "train", "--out", str(out), "--device", "tpu"]) == 2
    if not torch.cuda.is_available():
        assert main(["lm", "train", "--out", str(out), "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "train.device must be auto, cpu, cuda or cuda:N; got 'tpu'" in err[0]
    assert torch.cuda.is_available() or "CUDA is not available" in err[1]
    assert not out.exists()
    run = train_lm(apply_overrides(LMConfig(), {**TINY, "train.steps": 3, "train.device": "cpu"}), tmp_path / "cpu")
    assert rundir.snapshot_times(run) == [0, 1, 2, 3]

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

from ctxstair import rundir
from ctxstair.cli import main
from ctxstair.config import apply_overrides
from ctxstair.config.lm import LMConfig
from ctxstair.lm.train import train_lm
from ctxstair.run import Run

TINY = {"model.d_model": 16, "model.n_layers": 1, "model.n_heads": 2, "model.head_dim": 8, "model.d_mlp": 32,
        "corpus.window": 16, "corpus.vocab_size": 300, "corpus.max_tokens": 20000, "train.steps": 30,
        "train.batch_size": 8, "train.lr": 1e-2, "snapshots.log_points": 4, "snapshots.every": 10}
SRC = Path(__file__).resolve().parents[1] / "src"

# The two processes compute each slice's mean loss and average them (losses and gradients), where one
# process takes one mean over the batch: the float32 sums are ordered differently, and AdamW carries
# the rounding on. Measured on this model over 30 steps, train.seed 0–3: training losses (≈ 4.5)
# differ by at most 1.4e-6, held-out losses by 4.8e-7, W_E (entries ≈ 0.25) by 2.2e-7 and any
# weight by 7.3e-7. The tolerances are about 7–10 times the largest of these.
LOSS_TOL = 1e-5
WEIGHT_TOL = 2e-6


def settings(**extra) -> list[str]:
    return sum((["--set", f"{k}={v}"] for k, v in {**TINY, **extra}.items()), [])


def torchrun(*args: str) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --nproc_per_node=2 --standalone -m ctxstair lm train ARGS``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
                           "-m", "ctxstair", "lm", "train", "--no-analysis", *args],
                          env=env, capture_output=True, text=True, timeout=120)


def assert_same_run(single: Path, parallel: Path) -> None:
    """Same snapshot steps and logged steps; losses within LOSS_TOL, every weight within WEIGHT_TOL."""
    assert rundir.snapshot_times(parallel) == rundir.snapshot_times(single)
    rows_1, rows_2 = rundir.read_metric_rows(single), rundir.read_metric_rows(parallel)
    assert [sorted(r) + [r["step"]] for r in rows_2] == [sorted(r) + [r["step"]] for r in rows_1]
    for r1, r2 in zip(rows_1, rows_2):
        assert r2.get("loss", 0) == pytest.approx(r1.get("loss", 0), abs=LOSS_TOL)
        assert r2.get("val_loss", 0) == pytest.approx(r1.get("val_loss", 0), abs=LOSS_TOL)
        assert r2.get("lr") == r1.get("lr")
    w1, w2 = Run(single).snapshot(30), Run(parallel).snapshot(30)
    assert w1.keys() == w2.keys()
    for name in w1:
        torch.testing.assert_close(w2[name], w1[name], rtol=0, atol=WEIGHT_TOL, msg=name)


def test_two_process_ddp_reproduces_the_single_process_run(tmp_path):
    single = tmp_path / "single"
    assert main(["lm", "train", "--no-analysis", "--out", str(single), *settings()]) == 0
    result = torchrun("--out", str(tmp_path / "ddp"), *settings())
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_run(single, tmp_path / "ddp")
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

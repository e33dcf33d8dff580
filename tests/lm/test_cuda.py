"""On a CUDA device (skipped elsewhere; ``benchmarks/device_check.sh`` runs them on a GPU machine):
``lm train`` trains the CPU's model up to float32 rounding, bf16 autocast and micro-batches train
what they train on the CPU, a run is bitwise repeatable on the GPU, and the ensemble engine agrees
with the CPU."""

import numpy as np
import pytest
import torch

from ctxstair import rundir
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.config.lm import LMConfig
from ctxstair.lm.train import train_lm
from ctxstair.run import Run
from ctxstair.train import train_run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

TINY = {"model.d_model": 32, "model.n_layers": 2, "model.n_heads": 2, "model.head_dim": 16, "model.d_mlp": 64,
        "corpus.window": 32, "corpus.vocab_size": 300, "corpus.max_tokens": 30000, "train.steps": 20,
        "train.batch_size": 8, "train.lr": 1e-2, "snapshots.log_points": 2, "snapshots.every": 20,
        "analysis.enabled": False}
# CPU and GPU kernels sum in other orders (and cuBLAS may split the reduction): float32 rounding
# carried by AdamW over 20 steps, on weights of order 0.1–1.
ACROSS_DEVICES = 1e-4


def lm_run(tmp_path, name: str, **extra):
    out = train_lm(apply_overrides(LMConfig(), {**TINY, **extra}), tmp_path / name)
    return Run(out).snapshot(TINY["train.steps"]), [r["loss"] for r in rundir.read_metric_rows(out) if "loss" in r]


def test_lm_train_on_cuda_is_the_cpu_run_up_to_rounding_and_repeats_bitwise(tmp_path):
    cpu, _ = lm_run(tmp_path, "cpu", **{"train.device": "cpu"})
    gpu, _ = lm_run(tmp_path, "gpu", **{"train.device": "cuda"})
    again, _ = lm_run(tmp_path, "again", **{"train.device": "cuda"})
    for name in cpu:
        torch.testing.assert_close(gpu[name], cpu[name], rtol=0, atol=ACROSS_DEVICES, msg=name)
        assert torch.equal(gpu[name], again[name]), name


def test_bf16_and_micro_batches_on_cuda(tmp_path):
    _, plain = lm_run(tmp_path, "plain", **{"train.device": "cuda"})
    _, bf16 = lm_run(tmp_path, "bf16", **{"train.device": "cuda", "train.precision": "bf16",
                                          "train.fused_adamw": True, "train.tf32": True})
    _, micro = lm_run(tmp_path, "micro", **{"train.device": "cuda", "train.micro_batches": 4})
    assert bf16 != plain and np.allclose(bf16, plain, rtol=0.05) and bf16[-1] < bf16[0] - 0.5
    assert np.allclose(micro, plain, rtol=0, atol=1e-4)


def test_ensemble_engine_on_cuda_matches_the_cpu(tmp_path):
    settings = {"task.N": 6, "model.d": 16, "train.epochs": 50, "train.members": 4, "snapshots.every": 50}
    runs = {}
    for device in ("cpu", "cuda"):
        out = train_run(apply_overrides(RunConfig(), {**settings, "train.device": device}), tmp_path / device)
        runs[device] = Run(out).snapshot(50)
    for name in runs["cpu"]:
        torch.testing.assert_close(runs["cuda"][name], runs["cpu"][name], rtol=0, atol=ACROSS_DEVICES, msg=name)

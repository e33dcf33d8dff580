"""``lm train`` at scale, on the CPU: FSDP2 under torchrun (gloo) resumes bit for bit after a kill and
from a one-process checkpoint; a run streamed from token shards is the in-memory run; the options
for GPUs (micro-batches, fused AdamW, bf16 autocast) train what they should; bad settings exit 2."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from repo_paths import HELPERS, SRC

from ctxstair import rundir
from ctxstair.cli import main
from ctxstair.config import apply_overrides
from ctxstair.config.lm import LMConfig
from ctxstair.lm.train import train_lm
from ctxstair.run import Run
from ctxstair.text.corpora import load_text
from ctxstair.text.windows import read_tokenizer

TINY = {"model.d_model": 16, "model.n_layers": 2, "model.n_heads": 2, "model.head_dim": 8, "model.d_mlp": 32,
        "corpus.window": 16, "corpus.vocab_size": 300, "corpus.max_tokens": 20000, "train.steps": 30,
        "train.batch_size": 8, "train.lr": 1e-2, "snapshots.log_points": 4, "snapshots.every": 10,
        "analysis.enabled": False}
# As in tests/lm/test_ddp.py: two processes sum the float32 batch in another order than one, and
# AdamW carries the rounding on (measured there: weights within 7.3e-7 over 30 steps).
WEIGHT_TOL = 2e-6


def config(**extra) -> LMConfig:
    return apply_overrides(LMConfig(), {**TINY, **extra})


def torchrun_worker(out: Path, kill_at: int | None = None, **extra) -> subprocess.CompletedProcess:
    """Two ranks of ``tests/helpers/lm_fsdp2_worker.py`` (FSDP2, gloo) on the TINY settings plus ``extra``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(SRC), str(HELPERS)])}
    env.pop("CTXSTAIR_TEST_KILL_AT", None)
    if kill_at is not None:
        env["CTXSTAIR_TEST_KILL_AT"] = str(kill_at)
    settings = [f"{k}={v}" for k, v in {**TINY, "train.sharding": "fsdp2", **extra}.items()]
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
                           str(HELPERS / "lm_fsdp2_worker.py"), str(out), *settings],
                          env=env, capture_output=True, text=True, timeout=180)


def run_files(out: Path) -> dict[str, bytes]:
    """What a run computed: metrics, members and every snapshot, as bytes."""
    snapshots = sorted((out / "snapshots").glob("*.safetensors"))
    names = ["metrics.jsonl", "members.csv", *(f"snapshots/{p.name}" for p in snapshots)]
    return {name: (out / name).read_bytes() for name in names}


@pytest.mark.extended  # two-process jobs
def test_fsdp2_run_resumes_bitwise_after_a_kill(tmp_path):
    reference = torchrun_worker(tmp_path / "reference")
    assert reference.returncode == 0, reference.stderr[-3000:]
    killed = torchrun_worker(tmp_path / "run", kill_at=25)
    assert killed.returncode != 0  # both ranks died at step 25, after the checkpoint of step 20
    assert Run(tmp_path / "run").has_checkpoint() and not (tmp_path / "run" / "resources.json").exists()
    resumed = torchrun_worker(tmp_path / "run")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert run_files(tmp_path / "run") == run_files(tmp_path / "reference")
    # The checkpoint is the one-process format: whole tensors, read back by a plain run.
    assert rundir.snapshot_times(tmp_path / "run") == [0, 1, 2, 5, 10, 20, 30]


@pytest.mark.extended
def test_fsdp2_resumes_a_one_process_checkpoint(tmp_path):
    """A one-process run interrupted after its step-20 checkpoint, finished by two FSDP2 ranks, ends
    where the uninterrupted one-process run does (within the rounding of two ranks)."""
    single = train_lm(config(), tmp_path / "single")

    def stop(step: int) -> None:
        if step == 25:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_lm(config(), tmp_path / "run", hook=stop)
    finished = torchrun_worker(tmp_path / "run")
    assert finished.returncode == 0, finished.stderr[-3000:]
    first, second = Run(single).snapshot(30), Run(tmp_path / "run").snapshot(30)
    before = Run(single).snapshot(20), Run(tmp_path / "run").snapshot(20)  # both written by one process
    assert all(torch.equal(before[0][name], before[1][name]) for name in before[0])
    for name in first:
        torch.testing.assert_close(second[name], first[name], rtol=0, atol=WEIGHT_TOL, msg=name)


def cli_settings(settings: dict) -> list[str]:
    return sum((["--set", f"{k}={v}"] for k, v in settings.items()), [])


def write_shards(tokens: np.ndarray, folder: Path, window: int) -> None:
    """``tokens`` as two uint16 nanoGPT-style ``.bin`` files, cut at a window boundary."""
    folder.mkdir()
    cut = (len(tokens) // window // 3) * window
    tokens[:cut].astype(np.uint16).tofile(folder / "a.bin")
    tokens[cut:].astype(np.uint16).tofile(folder / "b.bin")


def test_a_shard_streamed_run_is_the_in_memory_run(tmp_path):
    settings = {**TINY, "analysis.enabled": True, "analysis.measures": "rho_next", "analysis.k": 40}
    memory, streamed = tmp_path / "memory", tmp_path / "streamed"
    assert main(["lm", "train", "--out", str(memory), *cli_settings(settings)]) == 0
    tokens = read_tokenizer(memory).encode(load_text("synthetic"), max_tokens=TINY["corpus.max_tokens"])
    write_shards(tokens, tmp_path / "shards", TINY["corpus.window"])
    assert main(["lm", "train", "--out", str(streamed), *cli_settings(settings), "--set",
                 f"corpus.shards={tmp_path / 'shards'}", "--set", f"corpus.tokenizer={memory / 'tokenizer.json'}"]) == 0
    assert run_files(streamed) == run_files(memory)
    assert (streamed / "lm_analysis.csv").read_bytes() == (memory / "lm_analysis.csv").read_bytes()


def test_held_out_windows_can_be_capped_without_changing_training(tmp_path):
    full = rundir.read_metric_rows(train_lm(config(), tmp_path / "full"))
    capped = rundir.read_metric_rows(train_lm(config(**{"train.val_windows": 3}), tmp_path / "capped"))
    assert [r for r in full if "loss" in r] == [r for r in capped if "loss" in r]
    assert [r["val_loss"] for r in full if "val_loss" in r] != [r["val_loss"] for r in capped if "val_loss" in r]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return Run(out).snapshot(TINY["train.steps"])


@pytest.mark.parametrize("option", [{"train.micro_batches": 4}, {"train.fused_adamw": True}])
def test_micro_batches_and_fused_adamw_train_the_same_weights(tmp_path, option):
    """Four micro-batches of 2 are the gradient of the batch of 8 (the mean of equal-sized means),
    fused AdamW the same update: equal weights up to float32 rounding carried over 30 steps."""
    plain, other = final_weights(train_lm(config(), tmp_path / "plain")), final_weights(
        train_lm(config(**option), tmp_path / "other"))
    for name in plain:
        torch.testing.assert_close(other[name], plain[name], rtol=0, atol=WEIGHT_TOL, msg=name)


def test_bf16_autocast_trains_in_float32_weights(tmp_path):
    plain = train_lm(config(), tmp_path / "plain")
    bf16 = train_lm(config(**{"train.precision": "bf16"}), tmp_path / "bf16")
    assert all(w.dtype == torch.float32 for w in final_weights(bf16).values())
    losses = [[r["loss"] for r in rundir.read_metric_rows(out) if "loss" in r] for out in (plain, bf16)]
    assert losses[1] != losses[0]  # the forward pass did run in bf16
    # bf16 keeps 8 bits of mantissa: the losses (≈ 4–6) agree to a few percent, and both runs learn.
    assert np.allclose(losses[1], losses[0], rtol=0.05)
    assert losses[1][-1] < losses[1][0] - 0.5


@pytest.mark.parametrize("setting, message", [
    ("train.micro_batches=3", "train.micro_batches=3 does not divide"),
    ("train.sharding=zero", "train.sharding must be one of"),
    ("train.precision=fp16", "train.precision must be one of"),
    ("corpus.shards=x.bin", "corpus.tokenizer must be gpt2 or the path"),
])
def test_bad_settings_exit_2_and_write_nothing(tmp_path, capsys, setting, message):
    args = cli_settings(TINY)
    assert main(["lm", "train", "--out", str(tmp_path / "run"), *args, "--set", setting]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_shards_with_ids_beyond_the_vocabulary_are_refused(tmp_path, capsys):
    memory = train_lm(config(**{"train.steps": 1}), tmp_path / "memory")
    write_shards(np.full(4000, 65000), tmp_path / "shards", 16)
    args = cli_settings(TINY)
    assert main(["lm", "train", "--out", str(tmp_path / "run"), *args, "--set", f"corpus.shards={tmp_path / 'shards'}",
                 "--set", f"corpus.tokenizer={memory / 'tokenizer.json'}"]) == 2
    assert "token id 65000, outside the tokenizer's vocabulary" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_compiled_training_follows_the_eager_run(tmp_path):
    """``train.compile`` (inductor, which on the CPU compiles C++ for about 40 s: opt-in here, and run
    on CUDA by benchmarks/device_check.sh) trains the same model up to the rounding of fused kernels."""
    plain = train_lm(config(**{"train.steps": 10}), tmp_path / "plain")
    compiled = train_lm(config(**{"train.steps": 10, "train.compile": True}), tmp_path / "compiled")
    losses = [[r["loss"] for r in rundir.read_metric_rows(out) if "loss" in r] for out in (plain, compiled)]
    assert np.allclose(losses[1], losses[0], rtol=0, atol=1e-4)
    first, second = Run(plain).snapshot(10), Run(compiled).snapshot(10)
    for name in first:
        torch.testing.assert_close(second[name], first[name], rtol=0, atol=1e-4, msg=name)

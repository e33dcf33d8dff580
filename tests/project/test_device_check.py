"""The GPU check script, on a machine without a GPU: its shell is valid, it stops at once (exit 2,
nothing run) where there is no CUDA device, behind a GPU check that says yes it runs every step
under its time limit and summarises them (the CUDA steps fail with one line each, the CUDA tests
skip), its summary gathers what the steps wrote, and the throughput script's MFU is its FLOPs per
token (counted here by brute force) times its tokens/s."""

import json
import os
import subprocess
import sys

import pytest
import torch
from repo_paths import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))

import device_check_summary  # noqa: E402


def test_the_script_is_valid_shell():
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "device_check.sh")], check=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_without_cuda_it_stops_before_any_step(tmp_path):
    result = subprocess.run(["bash", str(ROOT / "benchmarks" / "device_check.sh"), str(tmp_path)],
                            capture_output=True, text=True, env={**os.environ, "PYTHON": sys.executable})
    assert result.returncode == 2 and "no CUDA device" in result.stdout
    assert (tmp_path / "steps.jsonl").read_text() == ""


STEPS = ["cuda_tests", "lm_bf16", "lm_bf16_compile", "lm_train_llama_bf16_compile", "lm_train_gpt_neox_bf16_compile",
         "monitor_sharded", "ensemble_k1024"]
TEST_STEPS = ("cuda_tests", "monitor_sharded")  # pytest runs: without CUDA its tests skip


@pytest.mark.extended
@pytest.mark.skipif(torch.cuda.is_available(), reason="fakes the GPU check on a machine without CUDA")
def test_behind_a_faked_gpu_check_every_step_runs_and_is_summarised(tmp_path):
    """≈ 25 s on 2 cores: the steps that need CUDA stop at their device check."""
    fake = tmp_path / "python"  # answers the script's GPU check, hands every other call to this Python
    fake.write_text(f'#!/bin/sh\ncase "$*" in *cuda.is_available*) echo "Fake GPU"; exit 0;; esac\n'
                    f'exec "{sys.executable}" "$@"\n')
    fake.chmod(0o755)
    out = tmp_path / "check"
    result = subprocess.run(["bash", str(ROOT / "benchmarks" / "device_check.sh"), str(out)], capture_output=True,
                            text=True, env={**os.environ, "PYTHON": str(fake)}, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((out / "device_check.json").read_text())
    assert report["gpu"] == "Fake GPU" and report["passed"] is False
    steps = {row["step"]: row for row in report["steps"]}
    assert list(steps) == STEPS and all(row["seconds"] < row["limit"] for row in steps.values())
    for name in TEST_STEPS:
        assert steps[name]["rc"] == 0 and "skipped" in steps[name]["log_tail"][-1], steps[name]["log_tail"]
    for name in (step for step in STEPS if step not in TEST_STEPS):
        assert steps[name]["rc"] != 0 and "Traceback" not in "\n".join(steps[name]["log_tail"]), name
        assert "CUDA" in steps[name]["log_tail"][-1], (name, steps[name]["log_tail"])


def test_the_summary_gathers_every_step(tmp_path):
    (tmp_path / "gpu.log").write_text("NVIDIA H200\n")
    (tmp_path / "steps.jsonl").write_text('{"step": "a", "rc": 0, "seconds": 3, "limit": 10}\n'
                                          '{"step": "b", "rc": 124, "seconds": 10, "limit": 10}\n')
    (tmp_path / "a.json").write_text('{"tokens_per_s": 5}')
    (tmp_path / "a.log").write_text("\n".join(f"line {i}" for i in range(40)))
    report = device_check_summary.summarise(tmp_path)
    assert report["gpu"] == "NVIDIA H200" and report["passed"] is False
    assert report["steps"][0]["result"] == {"tokens_per_s": 5}
    assert report["steps"][0]["log_tail"] == [f"line {i}" for i in range(25, 40)]
    assert report["steps"][1]["log_tail"] == [] and "result" not in report["steps"][1]


@pytest.mark.extended  # a benchmark script run whole: ≈ 8 s on 2 cores
def test_throughput_script_counts_its_flops(tmp_path):
    out = tmp_path / "speed.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "lm_train_speed.py"), "--quick", "--device", "cpu",
                    "--precision", "float32", "--json", str(out)], check=True, capture_output=True)
    result = json.loads(out.read_text())
    d, layers, vocab, T = result["d_model"], result["layers"], result["vocab"], result["window"]
    per_layer = 4 * d * d + 3 * d * 4 * d + 2 * d  # W_Q, W_K, W_V, W_O; SwiGLU's three; two norms
    matmul_params = layers * per_layer + d + vocab * d  # the final norm and W_U; W_E is a lookup
    assert result["parameters"] == matmul_params + vocab * d
    assert result["flops_per_token"] == 6 * matmul_params + 12 * layers * d * T
    assert result["mfu"] == pytest.approx(result["tokens_per_s"] * result["flops_per_token"] / 989.4e12)
    assert result["timed_steps"] == 4 and result["tokens_per_s"] > 0

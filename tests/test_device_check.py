"""The GPU check script, on a machine without a GPU: its shell is valid, it stops at once (exit 2,
nothing run) where there is no CUDA device, its summary gathers what the steps wrote, and the
throughput script's MFU is its FLOPs per token (counted here by brute force) times its tokens/s."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
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

"""Device choice: `train.device` names, CUDA refused where there is none (before
anything is written), cuda:LOCAL_RANK under torchrun — with CUDA's presence simulated both ways."""

import pytest
import torch

from ctxstair.cli import main
from ctxstair.config import RunConfig, apply_overrides
from ctxstair.devices import check_device_name, resolve_device
from ctxstair.errors import InputError
from ctxstair.train import train_run


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def one_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_device_names_accepted(name):
    check_device_name("train.device", name)


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:x", "CPU", "mps", ""])
def test_device_names_refused(name):
    with pytest.raises(InputError, match="train.device must be auto, cpu, cuda or cuda:N"):
        check_device_name("train.device", name)
    with pytest.raises(InputError, match="train.device"):
        apply_overrides(RunConfig(), {"train.device": name}).validate()


def test_without_cuda_auto_is_the_cpu_and_cuda_is_refused(no_cuda):
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu", local_rank=1) == torch.device("cpu")
    for name in ["cuda", "cuda:0"]:
        with pytest.raises(InputError, match=f"train.device={name} but CUDA is not available"):
            resolve_device(name)


def test_with_one_gpu(one_gpu):
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("cuda:0") == torch.device("cuda:0")
    assert resolve_device("cuda", local_rank=0) == torch.device("cuda:0")  # torchrun: cuda:LOCAL_RANK
    with pytest.raises(InputError, match="only 1 CUDA device"):
        resolve_device("cuda:3")
    with pytest.raises(InputError, match="under torchrun each process uses cuda:LOCAL_RANK"):
        resolve_device("cuda:0", local_rank=0)


def test_engine_refuses_missing_cuda_before_writing(no_cuda, tmp_path):
    cfg = apply_overrides(RunConfig(), {"train.device": "cuda", "task.N": 5, "train.epochs": 2})
    with pytest.raises(InputError, match="CUDA is not available"):
        train_run(cfg, tmp_path / "run")
    assert list(tmp_path.iterdir()) == []


def test_explicit_cpu_is_the_default_run_on_a_cpu_machine(no_cuda, tmp_path):
    small = {"task.N": 6, "model.d": 8, "train.epochs": 20, "snapshots.log_points": 2, "snapshots.every": 10}
    runs = [train_run(apply_overrides(RunConfig(), {**small, "train.device": device}), tmp_path / device)
            for device in ("auto", "cpu")]
    assert [(r / "metrics.jsonl").read_text() for r in runs][0] == (runs[1] / "metrics.jsonl").read_text()


@pytest.mark.parametrize("argv,message", [
    (["run", "staircase-add", "--device", "cuda"], "train.device=cuda but CUDA is not available"),
    (["run", "staircase-add", "--device", "tpu"], "train.device must be auto, cpu, cuda or cuda:N"),
    (["run", "staircase-add", "--device", "cpu", "--set", "train.device=cpu"], "--device and --set train.device"),
    (["lm", "train", "--device", "cuda"], "train.device=cuda but CUDA is not available"),
])
def test_cli_device_errors_exit_2_and_write_nothing(no_cuda, tmp_path, capsys, argv, message):
    assert main(argv + ["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []

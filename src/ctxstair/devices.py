"""Which torch device a run trains on: ``auto`` (CUDA when present), ``cpu``,
``cuda`` or ``cuda:N``. Shared by the ensemble engine (``train.device``, ``ctxstair run --device``)
and the language-model trainer, where under torchrun each process takes ``cuda:LOCAL_RANK``."""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any

from ctxstair.errors import InputError

if TYPE_CHECKING:
    import torch

DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:\d+)?")


def check_device_name(key: str, name: str) -> None:
    """InputError naming ``key`` unless ``name`` is auto, cpu, cuda or cuda:N."""
    if not DEVICE_PATTERN.fullmatch(str(name)):
        raise InputError(f"{key} must be auto, cpu, cuda or cuda:N; got {name!r}")


def resolve_device(name: str, local_rank: int | None = None, key: str = "train.device") -> torch.device:
    """The torch device of a device setting ``name``; under torchrun (``local_rank`` given) CUDA
    means ``cuda:LOCAL_RANK``. Raise InputError when CUDA is asked for and absent."""
    import torch  # here, so that checking a configuration does not load torch

    if name == "cpu" or (name == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise InputError(f"{key}={name} but CUDA is not available (torch {torch.__version__}); use cpu or auto")
    if local_rank is not None:
        if ":" in name:
            raise InputError(f"{key}={name}: under torchrun each process uses cuda:LOCAL_RANK; set {key}=cuda")
        name = f"cuda:{local_rank}"
    device = torch.device("cuda" if name == "auto" else name)
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise InputError(f"{key}={name} but only {torch.cuda.device_count()} CUDA device(s) are visible")
    return device


def add_device_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--device auto|cpu|cuda|cuda:N`` to a command: shorthand for ``--set train.device=...``."""
    parser.add_argument("--device", default=None, metavar="DEVICE",
                        help="auto (CUDA when present; the default), cpu, cuda or cuda:N; "
                             "same as --set train.device=DEVICE")


def with_device(overrides: dict[str, Any], device: str | None) -> dict[str, Any]:
    """``overrides`` plus ``train.device`` from ``--device`` (None: unchanged); InputError if both give it."""
    if device is None:
        return overrides
    if "train.device" in overrides:
        raise InputError("--device and --set train.device both give the device; use one")
    return {**overrides, "train.device": device}

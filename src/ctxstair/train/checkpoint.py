"""Resumable training state: parameters, optimizer state and random state, saved atomically.

Layout under ``run_dir/checkpoint/``: ``state-<epoch>.safetensors`` (all tensors) and
``state.json`` (the epoch, the tensor file's name and its SHA-256). ``state.json`` is written last
and is the commit point: an interruption at any moment leaves either the previous or the new state
valid; a tensor file that does not match its recorded hash is refused (issue 9 item 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from ctxstair.errors import InputError
from ctxstair.integrity import check_digest, digest
from ctxstair.io import atomic_write_bytes, atomic_write_text

CHECKPOINT_DIR = "checkpoint"


def save_checkpoint(run_dir: Path, epoch: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                    generator: torch.Generator) -> None:
    """Save the state at the start of ``epoch`` (parameters after ``epoch`` epochs of training).

    ``optimizer`` is None for a stateless update (the exact gradient flow)."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    tensors = {f"param.{name}": p.detach().cpu().clone() for name, p in model.named_parameters()}
    for pid, state in (optimizer.state_dict()["state"] if optimizer is not None else {}).items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{pid}.{key}"] = value.detach().cpu().clone()
    tensors["rng"] = generator.get_state()
    name, data = f"state-{epoch:06d}.safetensors", save_tensors(tensors)
    atomic_write_bytes(folder / name, data)
    atomic_write_text(folder / "state.json", json.dumps({"epoch": epoch, "tensors": name, "sha256": digest(data)}) + "\n")
    for old in folder.glob("state-*.safetensors"):
        if old.name != name:
            old.unlink()


def load_checkpoint(run_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                    generator: torch.Generator) -> int:
    """Restore a saved state into the given objects (``optimizer`` None: none to restore); return the
    epoch to continue from."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    try:
        info = json.loads((folder / "state.json").read_text())
        data = (folder / info["tensors"]).read_bytes()
    except (FileNotFoundError, KeyError, json.JSONDecodeError) as error:
        raise InputError(f"cannot resume {run_dir}: its checkpoint is missing or unreadable ({error})") from None
    if "sha256" in info:  # checkpoints written before hashes were recorded have none
        check_digest(folder / info["tensors"], data, info["sha256"])
    try:
        tensors = load_tensors(data)
    except Exception as error:  # safetensors raises its own error types for corrupt files
        raise InputError(f"cannot resume {run_dir}: {folder / info['tensors']} is unreadable ({error})") from None
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(tensors[f"param.{name}"])
    if optimizer is not None:
        state = optimizer.state_dict()
        for key, value in tensors.items():
            if key.startswith("optim."):
                _, pid, field = key.split(".", 2)
                state["state"].setdefault(int(pid), {})[field] = value
        optimizer.load_state_dict(state)
    generator.set_state(tensors["rng"])
    return int(info["epoch"])


def has_checkpoint(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a resumable state."""
    return (Path(run_dir) / CHECKPOINT_DIR / "state.json").is_file()

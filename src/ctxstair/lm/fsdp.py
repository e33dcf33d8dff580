"""How ``lm train`` spreads a decoder over the processes of a torchrun job (SPEC §5): DDP (every
rank holds the whole model) or FSDP2 (``torch.distributed.fsdp.fully_shard``: each decoder layer
and the root — embeddings, final norm, unembedding — sharded by rows across the ranks, gathered
layer by layer for the forward and backward passes).

Snapshots and checkpoints are always written whole: a sharded run gathers the full tensors onto
every rank (a collective every rank joins) and rank 0 writes them in the one-process format of
:meth:`ctxstair.run.Run.save_checkpoint`. So a checkpoint is the same file whatever the sharding
and the number of processes, and a run resumes from it under FSDP2, DDP or one process. (For
models whose full state does not fit in one host's memory a sharded checkpoint would be needed;
at the paper's 0.58 B parameters the full model, AdamW moments included, is 7 GB.)
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from ctxstair import run
from ctxstair.models.causal_lm import state_of
from ctxstair.models.view import view_of


def _dtensor():
    from torch.distributed.tensor import DTensor, distribute_tensor

    return DTensor, distribute_tensor


def shard(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """FSDP2 over the world of the process group: each block (the model's view says which modules
    they are), then the root; returns ``model`` (sharded in place: its parameters become DTensors
    sharded on their first axis)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    for block in view_of(model).blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether ``model``'s parameters are DTensors (FSDP2)."""
    DTensor, _ = _dtensor()
    return any(isinstance(p, DTensor) for p in model.parameters())


def _full(value: torch.Tensor) -> torch.Tensor:
    """A CPU copy of ``value``, gathered whole when it is a DTensor (a collective)."""
    DTensor, _ = _dtensor()
    if isinstance(value, DTensor):
        value = value.full_tensor()
    return value.detach().cpu().clone()


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state (:func:`ctxstair.models.causal_lm.state_of`: a tied weight once) as whole CPU
    tensors (every rank must call it when sharded)."""
    return {name: _full(value) for name, value in state_of(model).items()}


def checkpoint_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                       generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint (:func:`ctxstair.run.checkpoint_tensors`) with every sharded
    tensor gathered whole (every rank must call it when sharded)."""
    return run.checkpoint_tensors(model, optimizer, generator, copy=_full)


def restore(model: torch.nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator,
            tensors: dict[str, torch.Tensor]) -> None:
    """Load whole checkpoint tensors into a sharded model and its optimizer: each rank keeps its own
    rows of every parameter and AdamW moment (the inverse of :func:`checkpoint_tensors`)."""
    DTensor, distribute_tensor = _dtensor()

    def own_rows(value: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        if isinstance(p, DTensor) and value.shape == p.shape:
            return distribute_tensor(value.to(p.device_mesh.device_type), p.device_mesh, p.placements)
        return value  # AdamW's step count, and anything of a parameter that is not sharded

    run.restore_checkpoint(tensors, model, optimizer, generator, place=own_rows)


def gradient_sync(net: torch.nn.Module, sync: bool) -> contextlib.AbstractContextManager:
    """A context for one micro-batch's backward pass: gradients are reduced across the ranks only
    when ``sync`` (the last micro-batch of a step), under DDP or FSDP2; a no-op for one process."""
    if isinstance(net, torch.nn.parallel.DistributedDataParallel):
        return contextlib.nullcontext() if sync else net.no_sync()
    if hasattr(net, "set_requires_gradient_sync"):  # an FSDP2 module
        net.set_requires_gradient_sync(sync)
    return contextlib.nullcontext()

"""Reading a model sharded by FSDP2 (``fully_shard``: DTensor parameters) where it is, without a copy.

Every read here is a collective that every rank of the job joins, at the same point of the same
sequence of reads: the measurements run the same code on every rank (:mod:`ctxstair.monitor.staircase`).
Forward passes and vector-Jacobian products need nothing from here — FSDP2's own hooks gather each
unit for the pass and free it afterwards —; what the view reads outside a pass does:

* :func:`rows` — the rows of some tokens of a sharded (V, d) matrix: each rank fills the rows its
  shard holds into a zero (k, d) array and an all-reduce over the sharded mesh dimensions sums them
  (one nonzero term per entry, so the sum is exact);
* :func:`unsharded` — the units holding a module's parameters gathered while a weight of it is read
  (one block at a time: memory is bounded by the largest unit, as in a forward pass).

Nothing is written back: each unit is resharded on leaving, its training state as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from ctxstair.collectives import let_go
from ctxstair.errors import InputError

__all__ = ["is_sharded", "rows", "unsharded"]


def is_sharded(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is an FSDP2 shard (a DTensor)."""
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def rows(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The rows ``ids`` (k,) of a matrix (V, d) as a plain tensor (k, d) on its device, in its dtype.

    A DTensor sharded into contiguous blocks (``Shard``) or replicated along each mesh dimension is
    read by every rank together (module docstring) and every rank gets the rows; any other tensor is
    indexed."""
    if not is_sharded(weight):
        return weight.detach()[ids.to(weight.device)]
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    placements = weight.placements
    if any(type(p) not in (Shard, Replicate) for p in placements):  # _StridedShard and Partial are not blocks
        raise InputError(f"a weight is a DTensor placed as {placements}: only Shard and Replicate placements "
                         "can be read row by row")
    mesh = weight.device_mesh
    (n_rows, n_cols), (row0, col0) = compute_local_shape_and_global_offset(weight.shape, mesh, placements)
    local = weight.to_local().detach()
    ids = ids.to(local.device)
    out = torch.zeros(ids.numel(), weight.shape[1], dtype=local.dtype, device=local.device)
    here = (ids >= row0) & (ids < row0 + n_rows)
    out[here, col0: col0 + n_cols] = local[ids[here] - row0]
    for dim, placement in enumerate(placements):
        if isinstance(placement, Shard):
            torch.distributed.all_reduce(out, group=mesh.get_group(dim))
    let_go(out)
    return out


@contextlib.contextmanager
def unsharded(module: torch.nn.Module, root: torch.nn.Module) -> Iterator[None]:
    """``module``'s parameters whole on every rank while inside: every FSDP2 unit within it gathered,
    and ``root``'s own unit too when a parameter of ``module`` is still sharded (it holds that
    parameter); each resharded on leaving. Nothing happens for a model that is not sharded."""
    from torch.distributed.fsdp import FSDPModule

    units = [unit for unit in module.modules() if isinstance(unit, FSDPModule)]
    for unit in units:
        unit.unshard()
    if root not in units and isinstance(root, FSDPModule) and any(map(is_sharded, module.parameters())):
        root.unshard()
        units.append(root)
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()

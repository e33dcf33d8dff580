"""The weights of a model sharded across the processes of a job, read for the monitor
(:mod:`ctxstair.monitor.live`): FSDP2 (``fully_shard``: DTensor parameters), FSDP1
(``FullyShardedDataParallel``: flat parameters, a shard per process) and DeepSpeed ZeRO-3
(size-0 placeholders carrying ``ds_id``).

Every rank calls in, at the same steps and in the same order, so that every collective is joined;
rank 0 (:func:`measuring`) keeps the copies, the others keep nothing. What is gathered:

* the embedding rows of the tokens (:func:`embedding_rows`). FSDP2: only those rows, onto every rank
  (:func:`ctxstair.models.view.fsdp2.rows`). FSDP1: the flat parameter
  of the unit that holds the embedding (``summon_full_params(writeback=False, recurse=False)`` on the
  root when the root's own unit holds it, the whole network otherwise). ZeRO-3: the embedding alone
  (``GatheredParameters([weight], modifier_rank=None)``);
* for the path measures of a network not measured in place (:mod:`ctxstair.monitor.live`:
  every FSDP2 ``transformers`` model is), the whole state as float32 CPU copies (:func:`full_state`):
  one tensor at a time for FSDP2 (``full_tensor``) and ZeRO-3 (``GatheredParameters`` per
  parameter), which gather onto every rank, so every rank keeps its copy and counts a share of the
  attention-path windows (:func:`shares_paths`, :func:`summed_over_ranks`) instead of waiting for
  rank 0 to count them all; ``get_model_state_dict(full_state_dict=True, cpu_offload=True)`` for
  FSDP1, which gives rank 0 alone the copy (no rank holds the whole state on its GPU), so rank 0
  counts them all.

Nothing is written back and no shard is replaced: the training's parameters, their optimizer state
and what a checkpoint saves stay as they were. DeepSpeed is imported only for a ZeRO-3 model.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator

import numpy as np
import torch

from ctxstair.collectives import let_go
from ctxstair.errors import InputError
from ctxstair.models.view import fsdp2

FSDP1, FSDP2, ZERO3 = "fsdp1", "fsdp2", "zero3"
#: Module names the sharding and compiling wrappers insert into parameter names (FSDP1, activation
#: checkpointing, ``torch.compile``); ``get_model_state_dict`` leaves them out of its keys.
_WRAPPER_NAMES = {"_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"}


def measuring() -> bool:
    """Whether this process measures: rank 0 of an initialised process group of several processes,
    or a process outside any such group."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return True
    return dist.get_rank() == 0


def fsdp1_root(module: object) -> torch.nn.Module | None:
    """The first ``FullyShardedDataParallel`` (FSDP1) wrapper along ``module``'s chain of wrappers
    (``torch.compile``, FSDP1 itself), or None."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    while isinstance(module, torch.nn.Module):
        if isinstance(module, FullyShardedDataParallel):
            return module
        module = getattr(module, "_orig_mod", None)
    return None


def sharding(network: torch.nn.Module, root: torch.nn.Module | None) -> str | None:
    """How ``network``'s parameters are sharded: FSDP1 when ``root`` is its FSDP1 wrapper, else FSDP2
    (a DTensor parameter), ZeRO-3 (a parameter with ``ds_id``) or None. An FSDP1 network met without
    its root is an InputError: its embedding shard sits in the root's flat parameter."""
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.tensor import DTensor

    if root is not None:
        return FSDP1
    parameters = list(network.parameters())
    if any(isinstance(p, DTensor) for p in parameters):
        return FSDP2
    if any(hasattr(p, "ds_id") for p in parameters):
        return ZERO3
    if any(isinstance(m, FullyShardedDataParallel) for m in network.modules()):
        raise InputError(f"{type(network).__name__} holds FullyShardedDataParallel (FSDP1) units but not their root: "
                         "pass the module FullyShardedDataParallel returned (with the Trainer, add the callback "
                         "with ctxstair.monitor.attach(trainer, monitor))")
    return None


def embedding_rows(owner: torch.nn.Module, name: str, tokens: torch.Tensor, kind: str | None,
                   root: torch.nn.Module | None, keep: bool) -> tuple[int, torch.Tensor | None]:
    """``(V, rows)``: the embedding matrix ``getattr(owner, name)`` (V, d)'s number of rows and the
    rows of ``tokens`` (k,) as a CPU tensor (k, d) in the weight's dtype, or None unless ``keep``.
    ``kind``: :func:`sharding`'s answer; every rank of a sharded model must call, and they all check
    the tokens against the same V (an error is raised on every rank, before any later gather)."""
    from torch.distributed.tensor import DTensor

    weight = getattr(owner, name)
    if kind == FSDP1:
        with _fsdp1_unit(owner, root):
            return _rows(getattr(owner, name), tokens, keep)
    if hasattr(weight, "ds_id"):
        with _zero3_full(weight):
            return _rows(weight, tokens, keep)
    if isinstance(weight, DTensor):
        V = _checked(weight, tokens)
        rows = fsdp2.rows(weight, tokens)
        return V, rows.cpu() if keep else None
    if weight.untyped_storage().size() == 0 and weight.numel() > 0:
        raise InputError(f"the input embeddings of {type(owner).__name__} hold no data (a FullyShardedDataParallel "
                         "shard outside its forward): pass the module FullyShardedDataParallel returned")
    return _rows(weight, tokens, keep)


def shares_paths(kind: str | None) -> bool:
    """Whether every rank of an initialised process group gets the whole network from
    :func:`full_state` for ``kind`` (a :func:`sharding` answer) and so counts a share of the
    attention paths: FSDP2 and ZeRO-3."""
    dist = torch.distributed
    return kind in (FSDP2, ZERO3) and dist.is_available() and dist.is_initialized()


def full_state(network: torch.nn.Module, kind: str, root: torch.nn.Module | None) -> dict | None:
    """``network``'s state dict as float32 CPU copies (integer buffers as they are) on every rank when
    :func:`shares_paths`, else on the measuring rank alone (None on the others); ``kind`` a
    :func:`sharding` answer other than None. Every rank must call."""
    if kind == FSDP1:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        # Offloading a CPU model frees its flat parameters' storage (torch 2.13, gloo): only from CUDA.
        state = get_model_state_dict(root, options=StateDictOptions(full_state_dict=True, cpu_offload=_on_cuda(root)))
        prefix = _prefix(root, network)
        return {key[len(prefix):]: float32_copy(value) for key, value in state.items()
                if key.startswith(prefix)} if measuring() else None
    keep, copies = shares_paths(kind) or measuring(), {}
    state = {}
    for key, tensor in network.state_dict(keep_vars=True).items():
        if id(tensor) not in copies:  # a tied weight is gathered once
            with _full(tensor) as full:
                copies[id(tensor)] = float32_copy(full, clone=True) if keep else None
        state[key] = copies[id(tensor)]
    return state if keep else None


def same_on_every_rank(array: np.ndarray, what: str) -> None:
    """Check that every rank of the job holds the same ``array`` (a SHA-256 of its dtype, shape and
    bytes, gathered from every rank): an InputError on every rank otherwise, naming ``what``. Every
    rank must call."""
    digest = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode() + np.ascontiguousarray(array).tobytes())
    mine = torch.tensor(np.frombuffer(digest.digest()[:8], dtype=np.int64).copy(), device=_collective_device())
    every = [torch.empty_like(mine) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(every, mine)
    for tensor in (mine, *every):
        let_go(tensor)
    if any(not torch.equal(other, mine) for other in every):
        raise InputError(f"the ranks hold different {what}: build the monitor from the same windows on every rank")


def summed_over_ranks(count: Callable[[np.ndarray], np.ndarray], parts: list[np.ndarray], shape: tuple[int, ...],
                      idle: Callable[[], object] | None = None) -> np.ndarray:
    """The sum of ``count`` over ``parts`` (arrays of items), counted by the ranks of the job together:
    rank r counts parts r, r + W, r + 2W, ... (W ranks) and an all-reduce adds the float64 results, of
    ``shape``, so that every rank gets the sum. ``count`` must be a sum over items
    (:func:`ctxstair.measure.primitives.attention_path_counts` is), so the total is the count of all items
    up to the order of the additions. ``idle``: called by a rank in each round in which it has no part
    left, when counting is itself a collective (a forward pass of a model sharded by FSDP2), so that
    every rank makes the same number of calls. Every rank must call with the same ``parts``
    (:func:`same_on_every_rank`)."""
    dist = torch.distributed
    world, rank = dist.get_world_size(), dist.get_rank()
    mine = np.zeros(shape)
    for first in range(0, len(parts), world):
        if first + rank < len(parts):
            mine += count(parts[first + rank])
        elif idle is not None:
            idle()
    total = torch.from_numpy(np.ascontiguousarray(mine, dtype=np.float64)).to(_collective_device())
    dist.all_reduce(total)
    let_go(total)
    return total.cpu().numpy()


def float32_copy(tensor: torch.Tensor, clone: bool = False) -> torch.Tensor:
    """A floating tensor as float32 on the CPU (an integer one in its dtype); ``clone``: never the same
    storage (a ZeRO-3 parameter's storage is released when its gather ends)."""
    dtype = torch.float32 if tensor.is_floating_point() else tensor.dtype
    return tensor.detach().to("cpu", dtype, copy=clone)


def _checked(weight: torch.Tensor, tokens: torch.Tensor) -> int:
    """V of an embedding matrix (its global shape for a DTensor), refused unless a float (V, d) with
    rows for every token."""
    if weight.ndim != 2 or not weight.is_floating_point():
        raise InputError(f"the input embeddings must be a float matrix (V, d), got {weight.dtype} "
                         f"shape {tuple(weight.shape)}")
    if int(tokens.max()) >= weight.shape[0]:
        raise InputError(f"tokens hold id {int(tokens.max())}, but the model has only {weight.shape[0]} "
                         "embedding rows")
    return int(weight.shape[0])


def _rows(weight: torch.Tensor, tokens: torch.Tensor, keep: bool) -> tuple[int, torch.Tensor | None]:
    """V and the rows of ``tokens`` of a weight that holds all its rows here (None unless ``keep``)."""
    V = _checked(weight, tokens)
    return V, weight.detach()[tokens.to(weight.device)].cpu() if keep else None


@contextlib.contextmanager
def _fsdp1_unit(owner: torch.nn.Module, root: torch.nn.Module) -> Iterator[None]:
    """The embedding's FSDP1 unit unsharded, read-only, on every rank: only the root's own flat
    parameter when no nested unit holds ``owner`` (the usual wrapping of decoder layers), else all."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    nested = any(module is owner for unit in root.modules() if isinstance(unit, FSDP) and unit is not root
                 for module in unit.modules())
    with FSDP.summon_full_params(root, writeback=False, recurse=nested):
        yield


@contextlib.contextmanager
def _zero3_full(parameter: torch.nn.Parameter) -> Iterator[None]:
    """A ZeRO-3 parameter gathered on every rank, read-only (``modifier_rank=None``)."""
    import deepspeed

    with deepspeed.zero.GatheredParameters([parameter], modifier_rank=None):
        yield


@contextlib.contextmanager
def _full(tensor: torch.Tensor) -> Iterator[torch.Tensor]:
    """One tensor of a state dict whole, on every rank: a DTensor's ``full_tensor()``, a ZeRO-3
    parameter inside its gather, anything else as it is."""
    from torch.distributed.tensor import DTensor

    if isinstance(tensor, DTensor):
        yield tensor.full_tensor()
    elif hasattr(tensor, "ds_id"):
        with _zero3_full(tensor):
            yield tensor
    else:
        yield tensor


def _prefix(root: torch.nn.Module, network: torch.nn.Module) -> str:
    """``network``'s key prefix in the root's state dict (the wrappers' names left out)."""
    for name, module in root.named_modules():
        if module is network:
            kept = [part for part in name.split(".") if part and part not in _WRAPPER_NAMES]
            return "".join(f"{part}." for part in kept)
    raise InputError(f"{type(network).__name__} is not inside the FullyShardedDataParallel root "
                     f"{type(root).__name__} given for it")


def _collective_device() -> torch.device:
    """Where the default process group's collectives take their tensors: the CPU for gloo, the
    current CUDA device for NCCL."""
    backend = str(torch.distributed.get_backend())
    return torch.device("cpu") if "gloo" in backend else torch.device("cuda", torch.cuda.current_device())


def _on_cuda(module: torch.nn.Module) -> bool:
    """Whether ``module``'s parameters live on a CUDA device (FSDP1's offload to the CPU only then)."""
    return any(p.is_cuda for p in module.parameters())

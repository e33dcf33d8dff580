"""A model in memory, in someone else's training (the monitor, :mod:`ctxstair.monitor.staircase`): its
input-embedding rows and, for a Llama-family model, a float32 CPU copy of the network as a
:class:`~ctxstair.models.DecoderLM`.

The model is never run and never changed: the caller reads under :func:`reading` (eval mode and
``torch.no_grad``, every module's own training flag restored afterwards); only the rows of the
tokens are copied to the CPU for the embedding measures, the whole state only for the path measures.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import torch

from ctxstair.errors import InputError
from ctxstair.lm.checkpoints.base import NEEDS_LLAMA


def unwrap(model: object) -> object:
    """The module inside ``DistributedDataParallel`` / ``DataParallel`` and ``torch.compile`` wrappers."""
    while True:
        if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            model = model._orig_mod
        else:
            return model


@contextlib.contextmanager
def reading(model: object) -> Iterator[None]:
    """Eval mode and ``torch.no_grad`` while the weights are read; every module's own training flag is
    restored afterwards (a model may keep frozen parts in eval mode)."""
    modules = list(model.modules()) if isinstance(model, torch.nn.Module) else []
    flags = [module.training for module in modules]
    try:
        for module in modules:
            module.training = False
        with torch.no_grad():
            yield
    finally:
        for module, flag in zip(modules, flags):
            module.training = flag


def live_weights(model: object, tokens: np.ndarray, paths: bool) -> tuple[int, np.ndarray, object, str | None]:
    """``(V, rows, decoder, why)`` of a model in memory: its number of embedding rows, the rows of
    ``tokens`` as float64 numpy (k, d) (float32 values unless the model is float64, as a checkpoint is
    read), and with ``paths`` a float32 CPU :class:`~ctxstair.models.DecoderLM` copy of the network, or
    None and why not.

    ``model``: a Hugging Face ``PreTrainedModel`` (``get_input_embeddings()``), a DecoderLM, or any
    module with a ``W_E`` attribute (V, d) (a TransformerLens ``HookedTransformer``); wrapped in
    ``DistributedDataParallel`` or ``torch.compile`` is fine; any device, any float dtype. Sharded by
    FSDP2 (DTensor parameters), every rank must call it: the rows are gathered from the ranks that hold
    them, the whole network only for the path measures."""
    from ctxstair.models import DecoderLM
    from ctxstair.models.decoder_hf import decoder_config_from_hf, from_hf_weights

    model = unwrap(model)
    decoder, why = None, None
    if isinstance(model, DecoderLM):
        W_E = model.W_E
        if paths:
            decoder = DecoderLM(model.cfg)
            decoder.load_state_dict(_cpu_float32(model.state_dict()))
            decoder.eval()
    elif callable(getattr(model, "get_input_embeddings", None)) and hasattr(model, "config"):
        try:
            W_E = model.get_input_embeddings().weight
        except (AttributeError, NotImplementedError) as error:
            raise InputError(f"{type(model).__name__}.get_input_embeddings() gives no embedding weight: "
                             f"{error}") from None
        if paths:
            try:
                decoder_config_from_hf(model.config, pretrained=True)  # cheap: refuse before copying weights
                decoder = from_hf_weights(model.config, _cpu_float32(model.state_dict()))
            except InputError as error:
                why = f"{NEEDS_LLAMA}: {error}"
    elif getattr(model, "W_E", None) is not None:
        W_E = model.W_E
        why = f"{NEEDS_LLAMA}: {type(model).__name__} is neither a DecoderLM nor a Hugging Face Llama model"
    else:
        raise InputError(f"{type(model).__name__} has no input embeddings: pass a Hugging Face PreTrainedModel "
                         "(get_input_embeddings()), a ctxstair DecoderLM, or a module with a W_E attribute (V, d)")
    W_E = torch.as_tensor(W_E).detach()
    if W_E.ndim != 2 or not W_E.is_floating_point():
        raise InputError(f"the input embeddings must be a float matrix (V, d), got {W_E.dtype} "
                         f"shape {tuple(W_E.shape)}")
    if tokens.max() >= W_E.shape[0]:
        raise InputError(f"tokens hold id {tokens.max()}, but the model has only {W_E.shape[0]} embedding rows")
    rows = _sharded_rows(W_E, tokens) if _is_dtensor(W_E) else W_E[torch.from_numpy(tokens).to(W_E.device)].cpu()
    rows = (rows if rows.dtype == torch.float64 else rows.float()).numpy().astype(np.float64)
    return int(W_E.shape[0]), rows, decoder, why


def _cpu_float32(state: dict) -> dict:
    """A state dict's floating tensors as float32 CPU copies (integer buffers as they are, on the CPU)."""
    return {name: _whole(tensor).detach().to("cpu", torch.float32 if tensor.is_floating_point() else tensor.dtype)
            for name, tensor in state.items()}


def _is_dtensor(tensor: torch.Tensor) -> bool:
    return type(tensor).__name__ == "DTensor"  # FSDP2's sharded parameters; no import of torch.distributed needed


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``, gathered whole when it is a DTensor (a collective every rank joins)."""
    return tensor.full_tensor() if _is_dtensor(tensor) else tensor


def _sharded_rows(W_E: torch.Tensor, tokens: np.ndarray) -> torch.Tensor:
    """The rows ``tokens`` (k,) of an FSDP2 embedding (V, d) sharded by rows, as a CPU tensor (k, d):
    each rank fills the rows it holds (FSDP2 gives rank r the rows ``[r c, (r + 1) c)``,
    c = ceil(V / ranks), as ``torch.chunk`` cuts) into zeros, and a sum over the ranks assembles them;
    only k rows travel, never the whole matrix. Every rank must call it."""
    import torch.distributed as dist
    from torch.distributed.tensor.placement_types import Shard

    mesh, local = W_E.device_mesh, W_E.to_local()
    if mesh.ndim != 1 or W_E.placements != (Shard(0),):
        return W_E.full_tensor()[torch.from_numpy(tokens).to(local.device)].cpu()
    group = mesh.get_group()
    chunk = -(-W_E.shape[0] // dist.get_world_size(group))
    start = dist.get_rank(group) * chunk
    ids = torch.from_numpy(tokens).to(local.device)
    mine = (ids >= start) & (ids < start + local.shape[0])
    rows = torch.zeros(len(tokens), local.shape[1], dtype=local.dtype, device=local.device)
    rows[mine] = local[ids[mine] - start]
    dist.all_reduce(rows, group=group)
    return rows.cpu()

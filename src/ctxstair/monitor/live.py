"""A model in memory, in someone else's training (the monitor, :mod:`ctxstair.monitor.staircase`): its
input-embedding rows and, for the path measures, the network to measure.

The model is never changed: the caller measures under :func:`evaluating` (eval mode, every module's
own training flag restored afterwards) and reads the weights under ``torch.no_grad``. Only the rows
of the tokens are copied to the CPU for the embedding measures. The path measures run on the model
itself, where it is (any device, its own dtype), through its view (:mod:`ctxstair.models.view`):
forward passes and vector-Jacobian products that leave its weights, ``.grad`` fields and random
streams as they were. A model sharded across processes is read by collectives every rank joins:

* FSDP2: measured in place too. Every rank gets the rows and runs the path
  measures on the sharded model (each forward pass gathers one unit at a time, as in training), so
  no rank ever holds more than one unit whole;
* ZeRO-3 and FSDP1: a float32 CPU copy of the network is built from
  the gathered state — under ZeRO-3 on every rank, to count a share of the attention
  paths; under FSDP1 on rank 0 alone (:mod:`ctxstair.monitor.gather`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch

from ctxstair.checkpoints.base import NO_VIEW, model_from_state, view_positions
from ctxstair.errors import InputError
from ctxstair.monitor import gather


def unwrap(model: object) -> object:
    """The module inside ``DistributedDataParallel`` / ``DataParallel``, FSDP1, a DeepSpeed engine and
    ``torch.compile`` wrappers."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    while True:
        if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel,
                              FullyShardedDataParallel)) or type(model).__name__ == "DeepSpeedEngine":
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            model = model._orig_mod
        else:
            return model


def every_rank(model: object, root: object = None) -> bool:
    """Whether every rank of the job must take part in reading ``model`` (sharded by FSDP2, FSDP1 or
    DeepSpeed ZeRO-3; ``root`` as :func:`live_weights`), rather than only the rank that measures."""
    root = gather.fsdp1_root(model if root is None else root)
    return gather.sharding(unwrap(model), root) is not None


@contextlib.contextmanager
def evaluating(model: object) -> Iterator[None]:
    """Eval mode while the model is measured (no dropout, so no random numbers drawn); every module's
    own training flag is restored afterwards (a model may keep frozen parts in eval mode)."""
    modules = list(model.modules()) if isinstance(model, torch.nn.Module) else []
    flags = [module.training for module in modules]
    try:
        for module in modules:
            module.training = False
        yield
    finally:
        for module, flag in zip(modules, flags):
            module.training = flag


class LiveWeights(NamedTuple):
    """What :func:`live_weights` read of a model in memory.

    Attributes:
        V: the number of embedding rows.
        rows: the rows of the tokens as float64 numpy (k, d) (float32 values unless the model is
            float64, as a checkpoint is read); None on a rank that does not measure.
        decoder: with the path measures, the network to measure: the model itself when it is whole
            here or sharded by FSDP2, else a float32 CPU copy of the sharded one; else None.
        why: why there is no network although the path measures were asked for, else None.
        shared: the model is sharded and every rank holds ``decoder``, to count a share of the
            attention paths (:func:`ctxstair.monitor.gather.summed_over_ranks`).
        collective: ``decoder`` is the FSDP2-sharded model itself: its passes and reads are
            collectives, so every rank (each with the rows) runs the path measures.
    """

    V: int
    rows: np.ndarray | None
    decoder: object
    why: str | None
    shared: bool
    collective: bool = False


def live_weights(model: object, tokens: np.ndarray, paths: bool, root: object = None) -> LiveWeights | None:
    """The :class:`LiveWeights` of a model in memory: its embedding rows of ``tokens`` and, with
    ``paths``, the network to measure (module docstring), or why not.

    ``model``: a Hugging Face ``PreTrainedModel`` (``get_input_embeddings()``) or any
    module with a ``W_E`` attribute (V, d) (a TransformerLens ``HookedTransformer``); wrapped in
    ``DistributedDataParallel``, ``torch.compile``, FSDP1's ``FullyShardedDataParallel`` or a DeepSpeed
    engine is fine; any device, any float dtype. ``root``: the wrapper the training holds ``model`` in
    (only an FSDP1 root is used: it holds the embedding's shard when ``model`` is the network inside).

    A model sharded by FSDP2, FSDP1 or DeepSpeed ZeRO-3 (:func:`every_rank`) is read by every rank of
    the job together, each joining the gathers (:mod:`ctxstair.monitor.gather`), and only rank
    0 gets the rows. The others get None; or, with ``paths``, under FSDP2 the rows and the sharded
    model itself (``collective``), under ZeRO-3 the copy without rows (``shared``), to count their
    share of the attention paths. A model that is whole here is read by whoever calls."""
    root = gather.fsdp1_root(model if root is None else root)
    model = unwrap(model)
    kind = gather.sharding(model, root)
    copy, why = None, None
    if callable(getattr(model, "get_input_embeddings", None)) and hasattr(model, "config"):
        try:
            owner, name = model.get_input_embeddings(), "weight"
            owner.weight  # noqa: B018 - the error of a model without one, before any gather
        except (AttributeError, NotImplementedError) as error:
            raise InputError(f"{type(model).__name__}.get_input_embeddings() gives no embedding weight: "
                             f"{error}") from None
        _, why = view_positions(model.config)  # cheap: refuse before any gather
        copy = None if why else functools.partial(model_from_state, model.config, where="the gathered state")
    elif getattr(model, "W_E", None) is not None:
        owner, name = model, "W_E"
        why = f"{NO_VIEW} for {type(model).__name__}: not a Hugging Face causal LM"
    else:
        raise InputError(f"{type(model).__name__} has no input embeddings: pass a Hugging Face PreTrainedModel "
                         "(get_input_embeddings()) or a module with a W_E attribute (V, d)")
    measured = paths and copy is not None
    in_place = kind in (None, gather.FSDP2)
    collective = measured and kind is not None and in_place
    keep = kind is None or gather.measuring() or collective
    V, rows = gather.embedding_rows(owner, name, torch.from_numpy(tokens), kind, root, keep)
    state = gather.full_state(model, kind, root) if measured and not in_place else None
    shared = measured and gather.shares_paths(kind)
    if not (keep or shared):  # rank 0 measures
        return None
    if keep:
        rows = (rows if rows.dtype == torch.float64 else rows.float()).numpy().astype(np.float64)
    network = None if not measured else model if in_place else copy(state)
    return LiveWeights(V, rows, network, why if paths else None, shared, collective)


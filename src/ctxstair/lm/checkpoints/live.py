"""A model in memory, in someone else's training (the monitor, :mod:`ctxstair.monitor.staircase`): its
input-embedding rows and, for the path measures, the network to measure.

The model is never changed: the caller reads under :func:`reading` (eval mode and ``torch.no_grad``,
every module's own training flag restored afterwards). Only the rows of the tokens are copied to the
CPU for the embedding measures. The path measures run on the model itself, where it is (any device,
its own dtype), through its view (:mod:`ctxstair.models.view`): forward passes and vector-Jacobian
products that leave its weights, ``.grad`` fields and random streams as they were. A model sharded
across processes — FSDP2, FSDP1, DeepSpeed ZeRO-3 — is gathered for the read, and only then, by
collectives every rank joins; rank 0 keeps the rows, and for the path measures a float32 CPU copy
of the network is built from the gathered state (under FSDP2 and ZeRO-3 on every rank, to count a
share of the attention paths: :mod:`ctxstair.lm.checkpoints.sharded`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np
import torch

from ctxstair.errors import InputError
from ctxstair.lm.checkpoints import sharded
from ctxstair.lm.checkpoints.base import NO_VIEW, model_from_state, view_positions


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
    root = sharded.fsdp1_root(model if root is None else root)
    return sharded.sharding(unwrap(model), root) is not None


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


class LiveWeights(NamedTuple):
    """What :func:`live_weights` read of a model in memory.

    Attributes:
        V: the number of embedding rows.
        rows: the rows of the tokens as float64 numpy (k, d) (float32 values unless the model is
            float64, as a checkpoint is read); None on a rank that does not measure.
        decoder: with the path measures, the network to measure: the model itself when it is whole
            here, a float32 CPU copy of a sharded one; else None.
        why: why there is no network although the path measures were asked for, else None.
        shared: the model is sharded and every rank holds ``decoder``, to count a share of the
            attention paths (:func:`ctxstair.lm.checkpoints.sharded.summed_on_rank_0`).
    """

    V: int
    rows: np.ndarray | None
    decoder: object
    why: str | None
    shared: bool


def live_weights(model: object, tokens: np.ndarray, paths: bool, root: object = None) -> LiveWeights | None:
    """The :class:`LiveWeights` of a model in memory: its embedding rows of ``tokens`` and, with
    ``paths``, the network to measure (module docstring), or why not.

    ``model``: a Hugging Face ``PreTrainedModel`` (``get_input_embeddings()``), a DecoderLM, or any
    module with a ``W_E`` attribute (V, d) (a TransformerLens ``HookedTransformer``); wrapped in
    ``DistributedDataParallel``, ``torch.compile``, FSDP1's ``FullyShardedDataParallel`` or a DeepSpeed
    engine is fine; any device, any float dtype. ``root``: the wrapper the training holds ``model`` in
    (only an FSDP1 root is used: it holds the embedding's shard when ``model`` is the network inside).

    A model sharded by FSDP2, FSDP1 or DeepSpeed ZeRO-3 (:func:`every_rank`) is read by every rank of
    the job together, each joining the gathers (:mod:`ctxstair.lm.checkpoints.sharded`), and only rank
    0 gets the rows. The others get None, or, under FSDP2 and ZeRO-3 with ``paths``, the copy without
    rows (``shared``), to count their share of the attention paths. A model that is whole here is read
    by whoever calls."""
    from ctxstair.models import DecoderLM

    root = sharded.fsdp1_root(model if root is None else root)
    model = unwrap(model)
    kind = sharded.sharding(model, root)
    keep = kind is None or sharded.measuring()
    copy, why = None, None
    if isinstance(model, DecoderLM):
        owner, name = model, "W_E"
        copy = functools.partial(_decoder, model.cfg)
    elif callable(getattr(model, "get_input_embeddings", None)) and hasattr(model, "config"):
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
        why = f"{NO_VIEW} for {type(model).__name__}: neither a DecoderLM nor a Hugging Face causal LM"
    else:
        raise InputError(f"{type(model).__name__} has no input embeddings: pass a Hugging Face PreTrainedModel "
                         "(get_input_embeddings()), a ctxstair DecoderLM, or a module with a W_E attribute (V, d)")
    measured = paths and copy is not None
    V, rows = sharded.embedding_rows(owner, name, torch.from_numpy(tokens), kind, root, keep)
    state = sharded.full_state(model, kind, root) if measured and kind is not None else None
    shared = measured and sharded.shares_paths(kind)
    if not (keep or shared):  # rank 0 measures
        return None
    if keep:
        rows = (rows if rows.dtype == torch.float64 else rows.float()).numpy().astype(np.float64)
    network = None if not measured else model if kind is None else copy(state)
    return LiveWeights(V, rows, network, why if paths else None, shared)


def _decoder(cfg, state: dict):
    """A float32 CPU DecoderLM of ``cfg`` holding ``state``, in eval mode."""
    from ctxstair.models import DecoderLM

    decoder = DecoderLM(cfg)
    decoder.load_state_dict(state)
    return decoder.eval()

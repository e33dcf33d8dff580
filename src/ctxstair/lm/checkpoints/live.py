"""A model in memory, in someone else's training (the monitor, :mod:`ctxstair.monitor.staircase`): its
input-embedding rows and, for a Llama-family model, a float32 CPU copy of the network as a
:class:`~ctxstair.models.DecoderLM`.

The model is never run and never changed: the caller reads under :func:`reading` (eval mode and
``torch.no_grad``, every module's own training flag restored afterwards); only the rows of the
tokens are copied to the CPU for the embedding measures, the whole state only for the path measures.
A model sharded across processes — FSDP2, FSDP1, DeepSpeed ZeRO-3 — is gathered for the read, and
only then, by collectives every rank joins; rank 0 keeps the rows, and under FSDP2 and ZeRO-3 every
rank keeps the network's copy, to count a share of the attention paths
(:mod:`ctxstair.lm.checkpoints.sharded`).
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
from ctxstair.lm.checkpoints.base import NEEDS_LLAMA


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
        decoder: with the path measures, a float32 CPU :class:`~ctxstair.models.DecoderLM` copy of
            the network, else None.
        why: why there is no decoder although the path measures were asked for, else None.
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
    ``paths``, a float32 CPU :class:`~ctxstair.models.DecoderLM` copy of the network, or why not.

    ``model``: a Hugging Face ``PreTrainedModel`` (``get_input_embeddings()``), a DecoderLM, or any
    module with a ``W_E`` attribute (V, d) (a TransformerLens ``HookedTransformer``); wrapped in
    ``DistributedDataParallel``, ``torch.compile``, FSDP1's ``FullyShardedDataParallel`` or a DeepSpeed
    engine is fine; any device, any float dtype. ``root``: the wrapper the training holds ``model`` in
    (only an FSDP1 root is used: it holds the embedding's shard when ``model`` is the network inside).

    A model sharded by FSDP2, FSDP1 or DeepSpeed ZeRO-3 (:func:`every_rank`) is read by every rank of
    the job together, each joining the gathers (:mod:`ctxstair.lm.checkpoints.sharded`), and only rank
    0 gets the rows. The others get None, or, under FSDP2 and ZeRO-3 with ``paths``, the decoder
    without rows (``shared``), to count their share of the attention paths. A model that is whole
    here is read by whoever calls."""
    from ctxstair.models import DecoderLM
    from ctxstair.models.decoder_hf import decoder_config_from_hf, from_hf_weights

    root = sharded.fsdp1_root(model if root is None else root)
    model = unwrap(model)
    kind = sharded.sharding(model, root)
    keep = kind is None or sharded.measuring()
    build, why = None, None
    if isinstance(model, DecoderLM):
        owner, name = model, "W_E"
        if paths:
            build = functools.partial(_decoder, model.cfg)
    elif callable(getattr(model, "get_input_embeddings", None)) and hasattr(model, "config"):
        try:
            owner, name = model.get_input_embeddings(), "weight"
            owner.weight  # noqa: B018 - the error of a model without one, before any gather
        except (AttributeError, NotImplementedError) as error:
            raise InputError(f"{type(model).__name__}.get_input_embeddings() gives no embedding weight: "
                             f"{error}") from None
        if paths:
            try:
                decoder_config_from_hf(model.config, pretrained=True)  # cheap: refuse before copying weights
                build = functools.partial(from_hf_weights, model.config)
            except InputError as error:
                why = f"{NEEDS_LLAMA}: {error}"
    elif getattr(model, "W_E", None) is not None:
        owner, name = model, "W_E"
        why = f"{NEEDS_LLAMA}: {type(model).__name__} is neither a DecoderLM nor a Hugging Face Llama model"
    else:
        raise InputError(f"{type(model).__name__} has no input embeddings: pass a Hugging Face PreTrainedModel "
                         "(get_input_embeddings()), a ctxstair DecoderLM, or a module with a W_E attribute (V, d)")
    V, rows = sharded.embedding_rows(owner, name, torch.from_numpy(tokens), kind, root, keep)
    state = None
    if build is not None:
        state = {key: sharded.float32_copy(value) for key, value in model.state_dict().items()} if kind is None \
            else sharded.full_state(model, kind, root)
    shared = build is not None and sharded.shares_paths(kind)
    if not (keep or shared):  # rank 0 measures
        return None
    if keep:
        rows = (rows if rows.dtype == torch.float64 else rows.float()).numpy().astype(np.float64)
    return LiveWeights(V, rows, None if build is None else build(state), why, shared)


def _decoder(cfg, state: dict):
    """A float32 CPU DecoderLM of ``cfg`` holding ``state``, in eval mode."""
    from ctxstair.models import DecoderLM

    decoder = DecoderLM(cfg)
    decoder.load_state_dict(state)
    return decoder.eval()

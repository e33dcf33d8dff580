"""A view of a language model as it is: the parts the staircase measurements read (SPEC §6.4, §7).

The measurements never convert a model. They ask its view for

* ``embedding`` — the token-embedding matrix ``W_E`` (V, d), a parameter of the model itself;
* :meth:`ModelView.forward` — one forward pass of the model on token windows that also returns the
  *summands* of the final residual stream (``embed``, ``pos`` where positions are learned,
  ``attn.ℓ``, ``mlp.ℓ``), the stream the final norm reads, and the unembedding's input and output,
  read by forward hooks: the model computes, the view listens;
* :meth:`ModelView.attention_pattern` — the model's own post-softmax attention (eager attention for
  that pass, the model's setting restored afterwards);
* :meth:`ModelView.value_output` — ``(W_V, W_O)`` of a layer (:mod:`ctxstair.models.view.adapter`).

A ``transformers`` model is read through the adapter of its ``model_type``
(:mod:`ctxstair.models.view.families`). A model of another family gets no view: :func:`adapter_of` refuses it with
one line naming the families and the file that adds one.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import NamedTuple

import torch

from ctxstair.errors import InputError
from ctxstair.models.view import fsdp2
from ctxstair.models.view.adapter import Adapter

__all__ = ["Forward", "ModelView", "adapter_of", "supported_families", "view_of"]


class Forward(NamedTuple):
    """One forward pass, read (shapes for windows (n, T), width d, vocabulary V).

    Attributes:
        summands: name -> (n, T, d), in stream order; summed they are ``stream`` up to rounding.
        stream: (n, T, d) the final residual stream, as the final norm reads it.
        logits: (n, T, V) the model's output.
        head_input, head_output: (n, T, d) and (n, T, V'): what the unembedding read and wrote
            (None for a model without an unembedding module).
        embedding: the ``W_E`` tensor the pass read: the model's parameter, or, under FSDP2, the
            whole tensor gathered for this pass (gradients are taken with respect to it).
    """

    summands: dict[str, torch.Tensor]
    stream: torch.Tensor
    logits: torch.Tensor
    head_input: torch.Tensor | None
    head_output: torch.Tensor | None
    embedding: torch.Tensor


@functools.cache
def registry() -> dict[str, Adapter]:
    """model_type -> adapter, over every file of :mod:`ctxstair.models.view.families` (each names its
    own file in ``source``)."""
    import importlib
    import pkgutil

    from ctxstair.models.view import families

    found = {}
    for info in pkgutil.iter_modules(families.__path__):
        adapter = importlib.import_module(f"{families.__name__}.{info.name}").ADAPTER
        for model_type in adapter.model_types:
            found[model_type] = Adapter(**{**adapter.__dict__, "source": f"models/view/families/{info.name}.py"})
    return found


def supported_families() -> list[str]:
    """The ``model_type`` values that have an adapter."""
    return sorted(registry())


def adapter_of(config) -> Adapter:
    """The adapter of a ``transformers`` config's family; InputError in one line naming the
    supported families and where an adapter is added when there is none."""
    model_type = getattr(config, "model_type", None) or (config.get("model_type") if isinstance(config, dict) else None)
    adapter = registry().get(model_type)
    if adapter is None:
        raise InputError(f"no model view for model_type {model_type!r}: the attention-path and path-share measures "
                         f"support {', '.join(supported_families())}; a family is added by a file in "
                         "src/ctxstair/models/view/families/")
    return adapter


def positions_of(config) -> int:
    """The longest window a ``transformers`` config's model takes (``max_position_embeddings``)."""
    return int(config.max_position_embeddings)


class ModelView:
    """The view of a ``transformers`` causal LM (module docstring); the model is read, never changed.

    Attributes:
        model: the causal-LM module (``PreTrainedModel``), on any device, in any float dtype.
        adapter: its family's :class:`~ctxstair.models.view.adapter.Adapter`.
        family: ``config.model_type``.
        n_layers, n_heads: blocks and query heads per block.
        positions: the longest window (``max_position_embeddings``).
        embedding: ``W_E`` (V, d), the input embedding's weight.
        unembedding: ``W_U`` (V', d), the output embedding's weight (None for a model without one).
        tied: the unembedding is the same parameter as ``W_E``.
        sharded: the parameters are FSDP2 shards (DTensors): every read of the model is a collective
            that every rank joins (:mod:`ctxstair.models.view.fsdp2`), and a forward pass frees its
            gathered weights after its first backward pass.
    """

    def __init__(self, model: torch.nn.Module):
        self.model, self.adapter = model, adapter_of(model.config)
        self.family = model.config.model_type
        self.blocks = list(model.get_submodule(self.adapter.blocks))
        self.n_layers = len(self.blocks)
        self.n_heads = model.config.num_attention_heads
        self.positions = positions_of(model.config)
        self.embedding = model.get_input_embeddings().weight
        head = model.get_output_embeddings()
        self.unembedding = None if head is None else head.weight
        self.tied = self.unembedding is self.embedding
        self.sharded = any(map(fsdp2.is_sharded, model.parameters()))

    #: The rows (k, d) of some token ids (k,) of ``embedding`` or ``unembedding``, read where the weight
    #: is: gathered from the shards of every rank under FSDP2 (:func:`~ctxstair.models.view.fsdp2.rows`).
    rows = staticmethod(fsdp2.rows)

    @property
    def vocab_size(self) -> int:
        """V, the embedding rows."""
        return int(self.embedding.shape[0])

    def forward(self, tokens: torch.Tensor) -> Forward:
        """Run the model on int (n, T) windows (on its device) and read the pass (:class:`Forward`)."""
        adapter, model = self.adapter, self.model
        read: dict[str, torch.Tensor] = {}

        def keep(name: str):
            def hook(module, args, output):
                read[name] = output[0] if isinstance(output, tuple) else output
            return hook

        def keep_embedding(module, args, output):
            read["embed"], read["embedding"] = output, module.weight

        def keep_stream(module, args):
            read["stream"] = args[0]

        def keep_head(module, args, output):
            read["head_input"], read["head_output"] = args[0], output

        plan = [(model.get_input_embeddings(), keep_embedding)]
        if adapter.positions:
            plan.append((model.get_submodule(adapter.positions), keep("pos")))
        for layer, block in enumerate(self.blocks):
            plan += [(block.get_submodule(adapter.attention_summand), keep(f"attn.{layer}")),
                     (block.get_submodule(adapter.mlp_summand), keep(f"mlp.{layer}"))]
        head = model.get_output_embeddings()
        if head is not None:
            plan.append((head, keep_head))
        handles = [module.register_forward_hook(hook) for module, hook in plan]
        handles.append(model.get_submodule(adapter.final_norm).register_forward_pre_hook(keep_stream))
        try:
            logits = model(input_ids=tokens, use_cache=False).logits
        finally:
            for handle in handles:
                handle.remove()
        names = ["embed", "pos"] + [f"{part}.{layer}" for layer in range(self.n_layers) for part in ("attn", "mlp")]
        summands = {name: read[name] for name in names if name in read}
        return Forward(summands, read["stream"], logits, read.get("head_input"), read.get("head_output"),
                       read["embedding"])

    def starting_at(self, summand: str) -> contextlib.AbstractContextManager:
        """A context for a backward pass that starts at ``summand`` (``attn.ℓ``, ``mlp.ℓ``, ...) of the
        last :meth:`forward`: under FSDP2 block ℓ gathered for it, since FSDP2's own hooks gather a
        block again only for a backward pass that comes in through the block's output; else nothing."""
        part, _, layer = summand.partition(".")
        if not (self.sharded and part in ("attn", "mlp")):
            return contextlib.nullcontext()
        return fsdp2.unsharded(self.blocks[int(layer)], self.model)

    def attention_pattern(self, tokens: torch.Tensor, average_heads: bool = False) -> torch.Tensor:
        """Post-softmax attention (n_layers, n, H, T_query, T_key) of int (n, T) windows (SPEC §7), read
        in one pass with eager attention (the only implementation that returns it); with
        ``average_heads`` the mean over heads (n_layers, n, T_query, T_key), taken layer by layer as
        the pass goes, so the heads of all layers are never held at once."""
        found: list[torch.Tensor] = []

        def keep_pattern(module, args, output):
            found.append(output[1].mean(dim=1) if average_heads else output[1])

        handles = [block.get_submodule(self.adapter.attention).register_forward_hook(keep_pattern)
                   for block in self.blocks]
        try:
            with _eager_attention(self.model.config):
                # Only the patterns are read, so the unembedding runs on the last position alone: at
                # V = 2,000 and d = 64 the logits of every position cost as much as the layers.
                self.model(input_ids=tokens, use_cache=False, logits_to_keep=1)
        finally:
            for handle in handles:
                handle.remove()
        return torch.stack(found)

    def value_output(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W_V, W_O)`` of a layer: (H·hd, d), one row block per query head, and (d, H·hd); biases
        left out (:mod:`ctxstair.models.view.adapter`). Under FSDP2 the layer is gathered for the read
        (every rank joins) and the matrices are copies."""
        block = self.blocks[layer]
        with fsdp2.unsharded(block, self.model):
            W_V, W_O = self.adapter.layout.value_output(block.get_submodule(self.adapter.attention), self.model.config)
            return (W_V.detach().clone(), W_O.detach().clone()) if self.sharded else (W_V, W_O)


@contextlib.contextmanager
def _eager_attention(config) -> Iterator[None]:
    """Eager attention for one pass (the only implementation that returns the pattern), then the
    model's own setting again."""
    before = config._attn_implementation
    config._attn_implementation = "eager"
    try:
        yield
    finally:
        config._attn_implementation = before


def view_of(model: torch.nn.Module) -> ModelView:
    """The view of a ``transformers`` causal LM; InputError (one line) for a model of a family without
    an adapter or another kind of module."""
    if hasattr(model, "config") and callable(getattr(model, "get_input_embeddings", None)):
        return ModelView(model)
    raise InputError(f"{type(model).__name__} is not a Hugging Face causal LM: the attention-path and path-share "
                     "measures need one")

"""What a family adapter declares (SPEC §6.4, §7), and the value-output maps the families share.

An :class:`Adapter` says where the parts of a ``transformers`` causal LM live, as dotted module
paths: the blocks, the final norm, and inside each block the attention module (whose second output
is the post-softmax pattern under eager attention) and the two modules whose outputs are *added to
the residual stream* — the attention and MLP summands of SPEC §6.4, taken after any post-sublayer
norm (OLMo-2, Gemma 2) or dropout. The token embedding is ``get_input_embeddings()`` (its output
is the embedding summand, already scaled where the family scales it, as Gemma does), the
unembedding ``get_output_embeddings()``; a position embedding added to the stream (GPT-2) is named
by ``positions``.

The value-output map of a layer, ``W_O W_V`` (SPEC §7), is read by one of the functions below,
chosen by the adapter: separate ``v``/``o`` projections (Llama and most families; grouped key/value
heads repeated for their query heads), GPT-NeoX's fused per-head ``query_key_value``, or GPT-2's
fused ``c_attn`` in ``Conv1D`` layout (in, out). Biases are left out: ``z_α = W_O W_V w_α`` is the
linear map of SPEC §7; a bias adds the same vector to every token's ``z`` and is not part of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

#: ``(W_V, W_O)`` of one block: (H·hd, d) with one row block per *query* head, and (d, H·hd).
ValueOutput = Callable[[torch.nn.Module, object], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Adapter:
    """Where a family keeps the parts the measurements read (module docstring).

    Attributes:
        model_types: the ``config.model_type`` values it serves.
        blocks: path of the ``ModuleList`` of blocks from the causal-LM module.
        final_norm: path of the norm that reads the final residual stream.
        attention: path, in a block, of the attention module (output ``(out, pattern)``).
        attention_summand: path, in a block, of the module whose output the block adds to the stream
            for attention.
        mlp_summand: the same for the MLP.
        value_output: reads ``(W_V, W_O)`` of a block (the functions of this module).
        positions: path of a position embedding whose output is added to the stream, if any.
        source: the adapter's file, for messages.
    """

    model_types: tuple[str, ...]
    blocks: str
    final_norm: str
    attention: str
    attention_summand: str
    mlp_summand: str
    value_output: ValueOutput
    positions: str | None = None
    source: str = ""


def heads_of(config) -> tuple[int, int, int]:
    """``(query heads H, key/value heads, head_dim)`` of a ``transformers`` config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return heads, kv_heads, head_dim


def _per_query_head(W_V: torch.Tensor, config) -> torch.Tensor:
    """Value rows (kv·hd, d) repeated so that each query head has its key/value head's block (H·hd, d),
    as attention with grouped key/value heads reads them."""
    heads, kv_heads, head_dim = heads_of(config)
    blocks = W_V.unflatten(0, (kv_heads, head_dim))
    return blocks.repeat_interleave(heads // kv_heads, dim=0).flatten(0, 1)


def separate_projections(value: str = "v_proj", output: str = "o_proj") -> ValueOutput:
    """``(W_V, W_O)`` from ``nn.Linear`` value and output projections of the attention module
    (weights (out, in)); grouped key/value heads repeated per query head."""
    def read(attention: torch.nn.Module, config) -> tuple[torch.Tensor, torch.Tensor]:
        W_V = attention.get_submodule(value).weight
        return _per_query_head(W_V, config), attention.get_submodule(output).weight

    return read


def fused_per_head(fused: str = "query_key_value", output: str = "dense") -> ValueOutput:
    """GPT-NeoX: one ``nn.Linear`` (3·H·hd, d) whose rows are, per head, its query, key and value
    blocks of hd rows each; ``W_O`` is ``output``'s weight."""
    def read(attention: torch.nn.Module, config) -> tuple[torch.Tensor, torch.Tensor]:
        heads, _, head_dim = heads_of(config)
        per_head = attention.get_submodule(fused).weight.unflatten(0, (heads, 3, head_dim))
        return per_head[:, 2].flatten(0, 1), attention.get_submodule(output).weight

    return read


def fused_conv1d(fused: str = "c_attn", output: str = "c_proj") -> ValueOutput:
    """GPT-2: ``Conv1D`` weights are (in, out); ``fused`` holds query, key and value side by side
    ((d, 3d): values in the last d columns), ``output`` is (d, d)."""
    def read(attention: torch.nn.Module, config) -> tuple[torch.Tensor, torch.Tensor]:
        W_QKV = attention.get_submodule(fused).weight
        d = W_QKV.shape[0]
        return W_QKV[:, 2 * d:].T, attention.get_submodule(output).weight.T

    return read


"""What a family adapter declares (SPEC §4, §6.4, §7), and the attention layouts the families share.

An :class:`Adapter` says where the parts of a ``transformers`` causal LM live, as dotted module
paths: the blocks, the final norm, and inside each block the attention module (whose second output
is the post-softmax pattern under eager attention) and the two modules whose outputs are *added to
the residual stream* — the attention and MLP summands of SPEC §6.4, taken after any post-sublayer
norm (OLMo-2, Gemma 2) or dropout. The token embedding is ``get_input_embeddings()`` (its output
is the embedding summand, already scaled where the family scales it, as Gemma does), the
unembedding ``get_output_embeddings()``; a position embedding added to the stream (GPT-2) is named
by ``positions``.

How a layer's attention holds its projections is one of the layouts below, chosen by the adapter:
separate ``q``/``k``/``v``/``o`` projections (Llama and most families; grouped key/value heads),
GPT-NeoX's fused per-head ``query_key_value``, or GPT-2's fused ``c_attn`` in ``Conv1D`` layout
(in, out). A layout reads the value-output map ``W_O W_V`` of SPEC §7 (grouped key/value heads
repeated for their query heads) and names the γ role of each part of each matrix (SPEC §4: ``qk``,
``ov``), which ``lm train`` initialises by. Biases are left out: ``z_α = W_O W_V w_α`` is the
linear map of SPEC §7; a bias adds the same vector to every token's ``z`` and is not part of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Parts of an attention module's weight matrices by γ role (SPEC §4): parameter name (relative to
#: the module) -> ``[(index, role), ...]``, ``weight[index]`` being the entries of ``role``
#: (``qk`` or ``ov``); ``...`` is the whole matrix.
Roles = dict[str, list[tuple[object, str]]]


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
        layout: how the attention module holds its projections (:class:`SeparateProjections`,
            :class:`FusedPerHead`, :class:`FusedConv1D`): ``(W_V, W_O)`` and the γ roles.
        embedding: the state-dict key of ``W_E`` (what readers of saved weights look up).
        positions: path of a position embedding whose output is added to the stream, if any.
        source: the adapter's file, for messages.
    """

    model_types: tuple[str, ...]
    blocks: str
    final_norm: str
    attention: str
    attention_summand: str
    mlp_summand: str
    layout: SeparateProjections | FusedPerHead | FusedConv1D
    embedding: str
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


@dataclass(frozen=True)
class SeparateProjections:
    """``nn.Linear`` query, key, value and output projections (weights (out, in)), grouped key/value
    heads allowed (Llama and most families)."""

    query: str = "q_proj"
    key: str = "k_proj"
    value: str = "v_proj"
    output: str = "o_proj"

    def value_output(self, attention: torch.nn.Module, config) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W_V, W_O)``, the value rows repeated per query head."""
        W_V = _per_query_head(attention.get_submodule(self.value).weight, config)
        return W_V, attention.get_submodule(self.output).weight

    def roles(self, attention: torch.nn.Module, config) -> Roles:
        """Every matrix whole: queries and keys ``qk``, values and output ``ov``."""
        return {f"{name}.weight": [(..., role)] for name, role in
                ((self.query, "qk"), (self.key, "qk"), (self.value, "ov"), (self.output, "ov"))}

    def width(self, attention: torch.nn.Module) -> int:
        """H·hd of the built module: the width the output projection reads."""
        return attention.get_submodule(self.output).weight.shape[1]


@dataclass(frozen=True)
class FusedPerHead:
    """GPT-NeoX: one ``nn.Linear`` (3·H·hd, d) whose rows are, per head, its query, key and value
    blocks of hd rows each; ``output``'s weight is ``W_O``."""

    fused: str = "query_key_value"
    output: str = "dense"

    def value_output(self, attention: torch.nn.Module, config) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W_V, W_O)``: the value block of every head."""
        heads, _, head_dim = heads_of(config)
        per_head = attention.get_submodule(self.fused).weight.unflatten(0, (heads, 3, head_dim))
        return per_head[:, 2].flatten(0, 1), attention.get_submodule(self.output).weight

    def roles(self, attention: torch.nn.Module, config) -> Roles:
        """The query and key rows of every head ``qk``; its value rows and the output ``ov``."""
        _, _, head_dim = heads_of(config)
        part = torch.arange(attention.get_submodule(self.fused).weight.shape[0]) // head_dim % 3  # 0 q, 1 k, 2 v
        return {f"{self.fused}.weight": [(part < 2, "qk"), (part == 2, "ov")], f"{self.output}.weight": [(..., "ov")]}

    def width(self, attention: torch.nn.Module) -> int:
        """H·hd of the built module."""
        return attention.get_submodule(self.fused).weight.shape[0] // 3


@dataclass(frozen=True)
class FusedConv1D:
    """GPT-2: ``Conv1D`` weights are (in, out); ``fused`` holds query, key and value side by side
    ((d, 3·H·hd): values in the last third of the columns), ``output`` is (H·hd, d)."""

    fused: str = "c_attn"
    output: str = "c_proj"

    def value_output(self, attention: torch.nn.Module, config) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W_V, W_O)`` in the (out, in) layout of the other families."""
        W_QKV = attention.get_submodule(self.fused).weight
        width = W_QKV.shape[1] // 3
        return W_QKV[:, 2 * width:].T, attention.get_submodule(self.output).weight.T

    def roles(self, attention: torch.nn.Module, config) -> Roles:
        """The query and key columns ``qk``; the value columns and the output ``ov``."""
        width = self.width(attention)
        return {f"{self.fused}.weight": [((slice(None), slice(0, 2 * width)), "qk"),
                                         ((slice(None), slice(2 * width, None)), "ov")],
                f"{self.output}.weight": [(..., "ov")]}

    def width(self, attention: torch.nn.Module) -> int:
        """H·hd of the built module."""
        return attention.get_submodule(self.output).weight.shape[0]

"""Blocks that normalise each sublayer's output before adding it to the stream: OLMo-2 and Gemma 2.

The summands are the outputs of ``post_attention_layernorm`` and ``post_feedforward_layernorm``
(in Llama the first name is the norm *before* the MLP; here it is after the attention).
"""

from ctxstair.models.view.adapter import Adapter, SeparateProjections

ADAPTER = Adapter(model_types=("olmo2", "gemma2"), blocks="model.layers", final_norm="model.norm",
                  attention="self_attn", attention_summand="post_attention_layernorm",
                  mlp_summand="post_feedforward_layernorm", layout=SeparateProjections(),
                  embedding="model.embed_tokens.weight")

"""Pre-norm blocks that add the attention module's and the MLP's outputs to the stream as they are.

Llama and Mistral; Qwen2 (q/k/v biases, left out of ``W_O W_V``) and Qwen3 (q/k norms, which do
not touch values); OLMo (LayerNorm without weights); Gemma (its embedding module multiplies by
√d, so the embedding summand is the scaled one); SmolLM3 (no rotary in every fourth layer, which
changes the pattern, not the layout).
"""

from ctxstair.models.view.adapter import Adapter, SeparateProjections

ADAPTER = Adapter(model_types=("llama", "mistral", "qwen2", "qwen3", "olmo", "gemma", "smollm3"),
                  blocks="model.layers", final_norm="model.norm", attention="self_attn", attention_summand="self_attn",
                  mlp_summand="mlp", layout=SeparateProjections(),
                  embedding="model.embed_tokens.weight")

"""GPT-2: learned position embeddings added to the token embeddings (a summand of their own, which
does not depend on ``W_E``), ``Conv1D`` weights stored (in, out), tied embeddings."""

from ctxstair.models.view.adapter import Adapter, fused_conv1d

ADAPTER = Adapter(model_types=("gpt2",), blocks="transformer.h", final_norm="transformer.ln_f", attention="attn",
                  attention_summand="attn", mlp_summand="mlp", value_output=fused_conv1d("c_attn", "c_proj"),
                  positions="transformer.wpe")

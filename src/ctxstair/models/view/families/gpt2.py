"""GPT-2: learned position embeddings added to the token embeddings (a summand of their own, which
does not depend on ``W_E``), ``Conv1D`` weights stored (in, out), tied embeddings."""

from ctxstair.models.view.adapter import Adapter, FusedConv1D

ADAPTER = Adapter(model_types=("gpt2",), blocks="transformer.h", final_norm="transformer.ln_f", attention="attn",
                  attention_summand="attn", mlp_summand="mlp", layout=FusedConv1D(),
                  embedding="transformer.wte.weight",
                  positions="transformer.wpe")

"""GPT-NeoX (Pythia): with ``use_parallel_residual`` both sublayers read the same stream and both
outputs are added at once; without it, sequentially. Either way the summands are what passes the
two residual dropouts. Query, key and value share one fused projection, per head."""

from ctxstair.models.view.adapter import Adapter, FusedPerHead

ADAPTER = Adapter(model_types=("gpt_neox",), blocks="gpt_neox.layers", final_norm="gpt_neox.final_layer_norm",
                  attention="attention", attention_summand="post_attention_dropout", mlp_summand="post_mlp_dropout",
                  layout=FusedPerHead(),
                  embedding="gpt_neox.embed_in.weight")

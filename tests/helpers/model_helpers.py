"""Tiny models saved the ways users hold them — Hugging Face folders (Llama, Qwen2), a Llama GGUF
file, an embedding-only GGUF file, LM runs of ours — for the checkpoint-source and analyze-model
tests. Nothing is downloaded: each is built here from a config."""

from __future__ import annotations

import json

import numpy as np
import torch
import transformers


def save_model(folder, tokenizer, family="llama", seed=0):
    """A tiny causal LM of ``family`` with ``tokenizer``'s vocabulary, saved the Hugging Face way;
    returns its input embeddings."""
    config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[family]
    config = config_class(vocab_size=tokenizer.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                          num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                          tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer).save_pretrained(folder)
    return model.get_input_embeddings().weight.detach().numpy().copy()


def save_llama(folder, tokenizer, seed=0):
    """A tiny Llama like SmolLM2 — grouped-query attention (6 query, 2 key/value heads), tied
    embeddings, RoPE base 500, RMSNorm eps 1e-5 — with weights large enough for uneven attention,
    saved the Hugging Face way; returns the model (float32, eval)."""
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, head_dim=4, max_position_embeddings=64,
        tie_word_embeddings=True, rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            noise = torch.randn(p.shape, generator=generator)
            p.copy_(1 + 0.3 * noise if p.ndim == 1 else noise * p.shape[-1] ** -0.5 * 2)
    model.save_pretrained(folder)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer).save_pretrained(folder)
    return model.eval()


def write_llama_gguf(file, hf, tokenizer):
    """``hf`` (a tiny Llama) as a llama.cpp GGUF file: llama.cpp tensor names, the query/key rows
    permuted into llama.cpp's RoPE layout (``convert_hf_to_gguf.py``), float32, with the tokenizer."""
    import gguf

    config = hf.config
    spec = json.loads(tokenizer.tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    writer = gguf.GGUFWriter(file, "llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_key_length(config.head_dim)
    writer.add_value_length(config.head_dim)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(sorted(vocab, key=vocab.get))
    writer.add_token_merges([" ".join(merge) for merge in spec["model"]["merges"]])
    writer.add_token_types([gguf.TokenType.NORMAL] * len(vocab))

    def permute(w, heads):
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    state = {name: t.detach().numpy() for name, t in hf.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])  # tied: no output.weight
    for layer in range(config.num_hidden_layers):
        for theirs, ours in names.items():
            w = state[f"model.layers.{layer}.{theirs}.weight"]
            if ours == "attn_q":
                w = permute(w, config.num_attention_heads)
            elif ours == "attn_k":
                w = permute(w, config.num_key_value_heads)
            writer.add_tensor(f"blk.{layer}.{ours}.weight", np.ascontiguousarray(w))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_embedding_gguf(file, tokenizer, quantisation: str) -> tuple[np.ndarray, np.ndarray]:
    """A GGUF file holding only a random embedding (stored in ``quantisation``) and ``tokenizer``;
    returns (the float32 matrix drawn, what the file stores)."""
    import gguf

    spec = json.loads(tokenizer.tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    W_E = np.random.default_rng(0).normal(size=(len(vocab), 32)).astype(np.float32)  # Q4_1 blocks of 32
    kind = gguf.GGMLQuantizationType[quantisation]
    stored = gguf.quants.quantize(W_E, kind)
    writer = gguf.GGUFWriter(file, "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(sorted(vocab, key=vocab.get))
    writer.add_token_merges([" ".join(merge) for merge in spec["model"]["merges"]])
    writer.add_token_types([gguf.TokenType.NORMAL] * len(vocab))
    writer.add_tensor("token_embd.weight", stored, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return W_E, stored

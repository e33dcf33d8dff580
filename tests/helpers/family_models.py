"""Tiny random causal LMs of every family the model view supports, built offline from ``transformers``
configs (vocabulary 64, width 32, 2 layers), with weights redrawn so that every part — biases, norm
weights, grouped key/value heads — carries signal. Shared by the view's tests and analyze-model's.
And the model ``ctxstair lm train`` builds, tiny (:func:`lm_train_model`), for the tests of what
measures a trained network."""

from __future__ import annotations

import torch
import transformers

V, D, LAYERS, HEADS, POSITIONS = 64, 32, 2, 4, 32

# No special token ids: the families' defaults lie outside a vocabulary of 64.
_COMMON = dict(vocab_size=V, hidden_size=D, intermediate_size=48, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
               max_position_embeddings=POSITIONS, bos_token_id=None, eos_token_id=None)
#: model_type -> config settings beyond the common ones: grouped key/value heads where the family has
#: them, the tying each family ships with, and its own switches (parallel residual, sliding window).
FAMILIES = {
    "llama": dict(num_key_value_heads=2, tie_word_embeddings=False),
    "mistral": dict(num_key_value_heads=2, tie_word_embeddings=False, sliding_window=None),
    "qwen2": dict(num_key_value_heads=2, tie_word_embeddings=True),
    "qwen3": dict(num_key_value_heads=2, head_dim=8, tie_word_embeddings=True),
    "olmo": dict(num_key_value_heads=4, tie_word_embeddings=False),
    "olmo2": dict(num_key_value_heads=2, tie_word_embeddings=False),
    "gemma": dict(num_key_value_heads=2, head_dim=8, tie_word_embeddings=True),
    "gemma2": dict(num_key_value_heads=2, head_dim=8, tie_word_embeddings=True, sliding_window=8),
    "smollm3": dict(num_key_value_heads=2, tie_word_embeddings=True, pad_token_id=0, no_rope_layer_interval=2),
    "gpt_neox": dict(use_parallel_residual=True, rotary_pct=0.5, tie_word_embeddings=False),
    "gpt2": dict(n_embd=D, n_layer=LAYERS, n_head=HEADS, n_positions=POSITIONS, n_inner=48, tie_word_embeddings=True),
}
#: Families whose modelling code computes in the model's dtype throughout (LayerNorm, no float32
#: casts): exact to float64 rounding. The others' norms cast to float32 whatever the input.
FLOAT64_THROUGHOUT = ("gpt_neox", "gpt2")


def family_config(family: str, vocab_size: int = V) -> transformers.PretrainedConfig:
    """The tiny config of ``family``."""
    settings = dict(FAMILIES[family])
    common = dict(_COMMON, vocab_size=vocab_size)
    if family == "gpt2":
        common = {"vocab_size": vocab_size, "bos_token_id": None, "eos_token_id": None}
    return transformers.AutoConfig.for_model(family, **common, **settings)


def family_model(family: str, seed: int = 0, dtype: torch.dtype = torch.float64,
                 vocab_size: int = V) -> transformers.PreTrainedModel:
    """A tiny random model of ``family`` in eval mode: norm weights 1 + 0.2·noise, biases 0.1·noise,
    matrices of standard deviation 1.5/√(fan-in), so attention is far from uniform."""
    config = family_config(family, vocab_size)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=torch.float64).to(dtype)
            if p.ndim == 1:
                p.copy_(0.1 * noise if name.endswith("bias") else 1 + 0.2 * noise)
            else:
                fan_in = p.shape[0] if family == "gpt2" and "wte" not in name and "wpe" not in name else p.shape[-1]
                p.copy_(noise * 1.5 * fan_in**-0.5)
    return model.eval()


def lm_train_model(vocab_size: int, family: str = "llama", positions: int = 32, d_model: int = 16, n_layers: int = 2,
                   n_heads: int = 2, head_dim: int = 8, d_mlp: int = 32, gamma: float = 1.0, seed: int = 0,
                   dtype: torch.dtype = torch.float32) -> transformers.PreTrainedModel:
    """The model ``ctxstair lm train`` builds (:mod:`ctxstair.models.causal_lm`: the family's config
    with these sizes, every role γ-initialised with ``gamma`` from ``seed``), in ``dtype``, in
    training mode as built."""
    from ctxstair.models import causal_lm

    sizes = {"d_model": d_model, "n_layers": n_layers, "n_heads": n_heads, "head_dim": head_dim, "d_mlp": d_mlp}
    config = causal_lm.family_config(family, vocab_size, positions, sizes)
    return causal_lm.build(config, dict.fromkeys(causal_lm.ROLES, gamma), seed).to(dtype)

"""Hugging Face configs and models for :class:`~ctxstair.models.DecoderLM` (SPEC §4-5).

* :func:`decoder_config_from_hf` — the sizes of a ``transformers`` Llama config (object, dict,
  ``config.json`` or a model directory) as a :class:`DecoderConfig`; the model built from it is
  γ-initialised by us (SPEC §4), never by the framework's ``initializer_range``.
* :func:`llama_config` — the ``LlamaConfig`` of a :class:`DecoderConfig`.
* :func:`to_hf` / :func:`from_hf` — copy weights into a ``LlamaForCausalLM`` (to use Hugging Face
  tooling on our checkpoints) and back; :func:`from_hf_weights` builds the DecoderLM from a config
  and a state dict (e.g. the tensors of a GGUF file).
* :data:`PAPER_0_7B` — the sizes of the paper's run.

Our decoder is exactly a Llama network with one key/value head per query head, plain RoPE of base
10000, RMSNorm eps 1e-6, SwiGLU (``silu``), untied embeddings, no biases and no dropout. A config
for training (:func:`decoder_config_from_hf`) that differs in any of these is refused with the
reason, never silently approximated: grouped-query attention, another ``rope_theta`` or a rope
scaling, tied embeddings, biases, another epsilon or activation, attention dropout. Qwen2 configs
are read but refused, because Qwen2 always has q/k/v biases; a LlamaConfig of the same sizes
describes the bias-free model DecoderLM is.

Loading a released model (:func:`from_hf`, ``pretrained=True``) also accepts what can be copied
into a DecoderLM that computes the same function: grouped-query attention (each key/value head's
weights repeated for the query heads of its group, as Hugging Face's ``repeat_kv`` does), tied
embeddings (``W_U`` a copy of ``W_E``), and any ``rope_theta`` and ``rms_norm_eps``
(:class:`DecoderConfig` ``rope_base``, ``rms_eps``). Rope scaling, biases, other activations and
attention dropout stay refused. SmolLM2 (9 query heads, 3 key/value heads, RoPE base 100000,
eps 1e-5, tied) loads this way.

The weight layouts agree: every matrix is (out, in) in both, and heads are contiguous blocks of
``head_dim`` rows of ``W_Q, W_K, W_V`` with the rotate-half RoPE pairing (i, i + hd/2) in both.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctxstair.errors import InputError
from ctxstair.models.decoder import RMS_EPS, ROPE_BASE, DecoderConfig, DecoderLM

if TYPE_CHECKING:
    import transformers

#: Sizes of the paper's decoder (SPEC §5), as :class:`~ctxstair.lm.train.LMModelConfig` (or
#: :class:`DecoderConfig`) fields; its vocabulary of 60,416 comes from the tokenizer.
PAPER_0_7B = {"d_model": 1024, "n_layers": 24, "n_heads": 16, "head_dim": 96, "d_mlp": 4096}

#: ``model_type`` values read; everything but the Llama architecture is then refused with a reason.
_FAMILIES = ("llama", "qwen2")

#: Hugging Face name of each per-block DecoderLM parameter (both (out, in): copied as they are).
_BLOCK_NAMES = {"ln_attn.weight": "input_layernorm.weight", "W_Q": "self_attn.q_proj.weight",
                "W_K": "self_attn.k_proj.weight", "W_V": "self_attn.v_proj.weight", "W_O": "self_attn.o_proj.weight",
                "ln_mlp.weight": "post_attention_layernorm.weight", "W_gate": "mlp.gate_proj.weight",
                "W_up": "mlp.up_proj.weight", "W_down": "mlp.down_proj.weight"}


def decoder_config_from_hf(config: Any, vocab_size: int | None = None, *, pretrained: bool = False,
                           **overrides: Any) -> DecoderConfig:
    """The :class:`DecoderConfig` of a Hugging Face Llama config (SPEC §5).

    Args:
        config: a ``transformers`` ``LlamaConfig`` (or ``Qwen2Config``, refused for its biases),
            its dict (``to_dict()``; needs ``model_type``), or the path of a ``config.json`` or of
            a directory holding one.
        vocab_size: replaces the config's ``vocab_size`` (e.g. our tokenizer's).
        pretrained: the config of a released model whose weights :func:`from_hf_weights` will copy:
            grouped-query attention, tied embeddings, any ``rope_theta`` and ``rms_norm_eps`` are
            accepted (module docstring). False (training a DecoderLM of these sizes): refused.
        overrides: other :class:`DecoderConfig` fields (γ's, ``seed``, ``max_seq_len``...).

    ``hidden_size`` → d_model, ``num_hidden_layers`` → n_layers, ``num_attention_heads`` →
    n_heads, ``head_dim`` (default hidden_size // heads) → head_dim, ``intermediate_size`` →
    d_mlp, ``max_position_embeddings`` → max_seq_len; with ``pretrained``, ``rope_theta`` →
    rope_base and ``rms_norm_eps`` → rms_eps. Raises InputError naming the first feature
    DecoderLM does not have (see the module docstring).
    """
    hf = _read_config(config)
    fields = {f.name for f in dataclasses.fields(DecoderConfig)}
    if set(overrides) - fields:
        raise InputError(f"unknown DecoderConfig field(s) {', '.join(sorted(set(overrides) - fields))}; "
                         f"fields are {', '.join(sorted(fields))}")
    rope = dict(hf.rope_parameters or {})
    heads = hf.num_attention_heads
    kv_heads = hf.num_key_value_heads or heads
    rope_theta = rope.get("rope_theta", ROPE_BASE)
    if pretrained and heads % kv_heads == 0:
        kv_heads = heads  # from_hf_weights repeats each key/value head for its group of query heads
    refusals = [
        (hf.model_type == "qwen2", "Qwen2 has q/k/v biases and DecoderLM has no biases (SPEC §5); "
                                   "use a LlamaConfig of the same sizes"),
        (getattr(hf, "attention_bias", False) or getattr(hf, "mlp_bias", False),
         "attention_bias/mlp_bias=True, but DecoderLM has no biases (SPEC §5)"),
        (kv_heads != heads, f"num_key_value_heads={kv_heads} differs from num_attention_heads={heads} "
                            "(grouped-query attention); DecoderLM has one key/value head per query head"
                            + ("" if not pretrained else ", and it does not divide the query heads into groups")),
        (rope.get("rope_type", "default") != "default",
         f"rope scaling {rope.get('rope_type')!r}, but DecoderLM uses plain RoPE"),
        (not pretrained and rope_theta != ROPE_BASE,
         f"rope_theta={rope.get('rope_theta')}, but DecoderLM's RoPE base is {ROPE_BASE:g}"),
        (not pretrained and hf.tie_word_embeddings,
         "tie_word_embeddings=True, but DecoderLM's W_E and W_U are untied (SPEC §5)"),
        (not pretrained and hf.rms_norm_eps != RMS_EPS,
         f"rms_norm_eps={hf.rms_norm_eps:g}, but DecoderLM's RMSNorm eps is {RMS_EPS:g}"),
        (hf.hidden_act != "silu", f"hidden_act={hf.hidden_act!r}, but DecoderLM's MLP is SwiGLU ('silu')"),
        (bool(hf.attention_dropout), f"attention_dropout={hf.attention_dropout}, but DecoderLM has no dropout"),
    ]
    for refused, reason in refusals:
        if refused:
            raise InputError(f"cannot build a DecoderLM from {_describe(config)}: {reason}")
    sizes = {"vocab_size": hf.vocab_size if vocab_size is None else vocab_size, "d_model": hf.hidden_size,
             "n_layers": hf.num_hidden_layers, "n_heads": heads,
             "head_dim": getattr(hf, "head_dim", None) or hf.hidden_size // heads,
             "d_mlp": hf.intermediate_size, "max_seq_len": hf.max_position_embeddings}
    if pretrained:
        sizes.update(rope_base=float(rope_theta), rms_eps=float(hf.rms_norm_eps))
    return DecoderConfig(**{**sizes, **overrides})


def _describe(config: Any) -> str:
    """How an error message names ``config``: its path, or its kind."""
    return str(config) if isinstance(config, (str, Path)) else f"a {type(config).__name__}"


def _read_config(config: Any) -> transformers.PreTrainedConfig:
    """``config`` as a Llama or Qwen2 config object (see :func:`decoder_config_from_hf`)."""
    import transformers
    from huggingface_hub.errors import StrictDataclassError

    if isinstance(config, transformers.PreTrainedConfig):
        data = config.to_dict()
    elif isinstance(config, dict):
        data = config
    elif isinstance(config, (str, Path)):
        path = Path(config)
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise InputError(f"no Hugging Face config at {path}: give a config.json or a directory holding one")
        try:
            data = json.loads(file.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise InputError(f"cannot read the Hugging Face config {file}: {error}") from None
    else:
        raise InputError(f"config must be a transformers config, a dict or a path, got {type(config).__name__}")
    if not isinstance(data, dict) or data.get("model_type") not in _FAMILIES:
        found = data.get("model_type") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"{_describe(config)} has model_type {found!r}; DecoderLM reads {' or '.join(_FAMILIES)} "
                         "configs (SPEC §5)")
    config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[data["model_type"]]
    try:
        return config_class.from_dict(data)
    except (StrictDataclassError, TypeError, ValueError) as error:
        # transformers' own validation (types, hidden_size divisible by heads...), in one line.
        raise InputError(f"invalid Hugging Face config {_describe(config)}: {' '.join(str(error).split())}") from None


def llama_config(cfg: DecoderConfig) -> transformers.LlamaConfig:
    """The ``LlamaConfig`` of the architecture of ``cfg`` (SPEC §5); the inverse of
    :func:`decoder_config_from_hf` on the sizes. Its ``initializer_range`` is never used by us."""
    import transformers

    if cfg.d_model % cfg.n_heads:
        # LlamaConfig validates this even when head_dim is given; DecoderLM does not need it.
        raise InputError(f"transformers' LlamaConfig needs d_model divisible by n_heads, got d_model={cfg.d_model}, "
                         f"n_heads={cfg.n_heads}")
    return transformers.LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_mlp,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.max_seq_len, hidden_act="silu", rms_norm_eps=cfg.rms_eps,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base}, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, attention_dropout=0.0,
        # Our tokenizers define no BOS/EOS ids; Llama's defaults (1, 2) would be wrong claims.
        bos_token_id=None, eos_token_id=None)


def _hf_names(n_layers: int) -> dict[str, str]:
    """Hugging Face ``LlamaForCausalLM`` state_dict name of every DecoderLM state_dict entry."""
    names = {"W_E": "model.embed_tokens.weight", "ln_final.weight": "model.norm.weight", "W_U": "lm_head.weight"}
    for layer in range(n_layers):
        names.update({f"blocks.{layer}.{ours}": f"model.layers.{layer}.{theirs}"
                      for ours, theirs in _BLOCK_NAMES.items()})
    return names


def to_hf(model: DecoderLM) -> transformers.LlamaForCausalLM:
    """A ``LlamaForCausalLM`` holding copies of ``model``'s weights, on its device and in its dtype.

    Its logits equal ``model(tokens)`` up to rounding: Hugging Face computes RMSNorm, softmax and
    the RoPE angles in float32 whatever the model's dtype."""
    from transformers import LlamaForCausalLM

    weight = model.W_E
    hf = LlamaForCausalLM(llama_config(model.cfg)).to(device=weight.device, dtype=weight.dtype)
    state = model.state_dict()
    hf.load_state_dict({theirs: state[ours] for ours, theirs in _hf_names(model.cfg.n_layers).items()}, strict=True)
    return hf.train(model.training)


def from_hf(hf_model: transformers.PreTrainedModel) -> DecoderLM:
    """A :class:`DecoderLM` holding copies of the weights of a Llama causal LM whose config
    :func:`decoder_config_from_hf` accepts with ``pretrained=True`` (grouped-query attention and
    tied embeddings included, see the module docstring); on its device and in its dtype, in the
    HF model's train/eval mode. Its logits equal the HF model's up to rounding.

    The returned model's ``cfg`` has the default γ's and seed: they describe no weights here."""
    cfg = decoder_config_from_hf(hf_model.config, pretrained=True)
    state = hf_model.state_dict()
    names = _hf_names(cfg.n_layers)
    missing = [theirs for ours, theirs in names.items() if theirs not in state and ours != "W_U"]
    if missing:
        raise InputError(f"hf_model has no {missing[0]} ({len(missing)} weights missing); from_hf needs a "
                         f"LlamaForCausalLM, got {type(hf_model).__name__}")
    return from_hf_weights(hf_model.config, state).train(hf_model.training)


def from_hf_weights(config: Any, state: dict[str, Any]) -> DecoderLM:
    """A :class:`DecoderLM` from a Hugging Face Llama config and its ``LlamaForCausalLM`` state dict.

    Args:
        config: as :func:`decoder_config_from_hf` (read with ``pretrained=True``).
        state: Hugging Face name -> tensor (``model.embed_tokens.weight``, ``model.layers.ℓ...``,
            ``model.norm.weight``, ``lm_head.weight``); all in one dtype and on one device, which
            the model takes. ``lm_head.weight`` may be absent when the config ties the embeddings.

    With ``num_key_value_heads`` = K < H query heads, ``k_proj`` / ``v_proj`` are (K·hd, d); key/value
    head j serves query heads ``j·H/K ... (j+1)·H/K − 1`` (Hugging Face ``repeat_kv``), so its
    rows are repeated H/K times into DecoderLM's (H·hd, d) ``W_K`` / ``W_V``. With tied embeddings
    ``W_U`` is a copy of ``W_E``. Raises InputError for a refused config or a missing or
    misshapen weight.
    """
    cfg = decoder_config_from_hf(config, pretrained=True)
    hf = _read_config(config)
    names = _hf_names(cfg.n_layers)
    state = dict(state)
    if names["W_U"] not in state and hf.tie_word_embeddings and names["W_E"] in state:
        state[names["W_U"]] = state[names["W_E"]]
    missing = [theirs for theirs in names.values() if theirs not in state]
    if missing:
        raise InputError(f"the weights lack {missing[0]} ({len(missing)} of the {len(names)} a DecoderLM of "
                         f"{cfg.n_layers} layers needs are missing)")
    groups = cfg.n_heads // (hf.num_key_value_heads or cfg.n_heads)
    ours = {}
    for name, theirs in names.items():
        tensor = state[theirs]
        if groups > 1 and name.endswith((".W_K", ".W_V")):  # (K·hd, d) -> (H·hd, d), heads in blocks of hd rows
            tensor = tensor.unflatten(0, (-1, cfg.head_dim)).repeat_interleave(groups, dim=0).flatten(0, 1)
        ours[name] = tensor
    weight = ours["W_E"]
    model = DecoderLM(cfg, dtype=weight.dtype).to(weight.device)
    try:
        model.load_state_dict(ours, strict=True)
    except RuntimeError as error:  # a shape that disagrees with the config
        reason = " ".join(str(error).split("\n")[-1].split())
        raise InputError(f"the weights do not fit the config {_describe(config)}: {reason}") from None
    return model.eval()

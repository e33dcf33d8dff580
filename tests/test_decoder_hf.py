"""ctxstair.models.decoder_hf (SPEC §4-5): Hugging Face configs → DecoderConfig with clear refusals,
DecoderLM ⇄ LlamaForCausalLM with the same logits, the paper's size preset, and ``model.hf_config``
in LM training. Nothing is downloaded: every config and model is built here."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
import transformers.models.llama.modeling_llama as modeling_llama
from test_lm_train import TINY

from ctxstair.config import apply_overrides
from ctxstair.config.lm import LMConfig
from ctxstair.errors import InputError
from ctxstair.lm.train import train_lm
from ctxstair.models.decoder import DecoderConfig, DecoderLM
from ctxstair.models.decoder_hf import PAPER_0_7B, decoder_config_from_hf, from_hf, llama_config, to_hf
from ctxstair.run import Run

CFG = DecoderConfig(vocab_size=50, d_model=16, n_layers=2, n_heads=2, head_dim=12, d_mlp=24, max_seq_len=12,
                    gamma=0.5, seed=3)


def tiny_llama(**fields) -> transformers.LlamaConfig:
    return transformers.LlamaConfig(**{"vocab_size": 40, "hidden_size": 16, "intermediate_size": 32,
                                       "num_hidden_layers": 1, "num_attention_heads": 2,
                                       "max_position_embeddings": 32, **fields})


@pytest.fixture
def model() -> DecoderLM:
    """A float64 decoder whose norm weights are not all 1, so that swapping two norms shows."""
    m = DecoderLM(CFG, dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("ln_attn.weight") or name.endswith("ln_mlp.weight") or name == "ln_final.weight":
                p.copy_(0.5 + torch.rand(p.shape, generator=generator, dtype=p.dtype))
    return m


@pytest.fixture
def tokens() -> torch.Tensor:
    return torch.randint(CFG.vocab_size, (3, CFG.max_seq_len), generator=torch.Generator().manual_seed(0))


@pytest.fixture
def hf_in_float64(monkeypatch):
    """Hugging Face's Llama computes RMSNorm and the RoPE angles in float32 whatever the model's
    dtype; these two replacements keep the model's dtype and change nothing else."""
    def rms_norm(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)

    def rotary(self, x, position_ids):
        hd = self.config.head_dim
        inv_freq = self.config.rope_parameters["rope_theta"] ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
        angles = position_ids[..., None].to(torch.float64) * inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", rms_norm)
    monkeypatch.setattr(modeling_llama.LlamaRotaryEmbedding, "forward", rotary)


@torch.no_grad()
def test_to_hf_gives_our_logits_in_float64(model, tokens, hf_in_float64):
    hf = to_hf(model)
    # "sdpa" keeps float64; the eager path's softmax is float32 (checked in the next test).
    hf.set_attn_implementation("sdpa")
    assert hf.lm_head.weight.data_ptr() != hf.model.embed_tokens.weight.data_ptr()  # untied
    ours = model(tokens)
    assert hf.dtype == torch.float64
    torch.testing.assert_close(hf(tokens).logits, ours, atol=1e-10, rtol=0)


@torch.no_grad()
def test_unmodified_hugging_face_llama_agrees_to_float32_rounding(model, tokens):
    hf = to_hf(model)
    hf.set_attn_implementation("eager")
    ours = model(tokens)
    assert ours.abs().max() > 1  # logits of order 1, so atol 1e-5 is about 1e-5 relative
    torch.testing.assert_close(hf(tokens).logits, ours, atol=1e-5, rtol=0)
    # A control: exchanging the two MLP input matrices is far outside that tolerance.
    hf.model.layers[0].mlp.gate_proj.weight.copy_(model.blocks[0].W_up)
    hf.model.layers[0].mlp.up_proj.weight.copy_(model.blocks[0].W_gate)
    assert (hf(tokens).logits - ours).abs().max() > 1e-3


def test_from_hf_inverts_to_hf_and_reads_hugging_face_models(model, tokens):
    back = from_hf(to_hf(model))
    assert back.cfg == DecoderConfig(**{**vars(CFG), "gamma": 1.0, "seed": 0})  # sizes kept; γ's describe no weights
    assert back.W_E.dtype == torch.float64
    assert back.state_dict().keys() == model.state_dict().keys()
    for name, value in model.state_dict().items():
        assert torch.equal(back.state_dict()[name], value), name
    assert back.W_E.data_ptr() != model.W_E.data_ptr()  # copies, not views

    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(tiny_llama(max_position_embeddings=12))
    ours = from_hf(hf)
    assert (ours.cfg.d_model, ours.cfg.head_dim, ours.cfg.vocab_size) == (16, 8, 40)
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens % 40), hf(tokens % 40).logits, atol=1e-5, rtol=0)

    with pytest.raises(InputError, match="has no model.embed_tokens.weight .*needs a LlamaForCausalLM, got LlamaModel"):
        from_hf(hf.model)


def test_decoder_config_from_objects_dicts_files_and_directories(tmp_path):
    expected = DecoderConfig(vocab_size=40, d_model=16, n_layers=1, n_heads=2, head_dim=8, d_mlp=32, max_seq_len=32)
    config = tiny_llama()
    config.save_pretrained(tmp_path / "model")
    (tmp_path / "hand.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": 40, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "max_position_embeddings": 32, "rope_theta": 10000.0}))  # old-style rope key
    for source in (config, config.to_dict(), tmp_path / "model", str(tmp_path / "model" / "config.json"),
                   tmp_path / "hand.json"):
        assert decoder_config_from_hf(source) == expected, source
    assert decoder_config_from_hf(config, 300, gamma_qk=2.0, seed=5) == DecoderConfig(
        **{**vars(expected), "vocab_size": 300, "gamma_qk": 2.0, "seed": 5})
    assert decoder_config_from_hf(tiny_llama(head_dim=12)).head_dim == 12  # head_dim need not be hidden/heads
    assert decoder_config_from_hf(llama_config(CFG), seed=CFG.seed, gamma=CFG.gamma) == CFG


@pytest.mark.parametrize("config, message", [
    (tiny_llama(num_key_value_heads=1), "num_key_value_heads=1 differs from num_attention_heads=2 "
                                        r"\(grouped-query attention\)"),
    (tiny_llama(tie_word_embeddings=True), "tie_word_embeddings=True, but DecoderLM's W_E and W_U are untied"),
    (tiny_llama(rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
     "rope_theta=500000.0, but DecoderLM's RoPE base is 10000"),
    (tiny_llama(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
     "rope scaling 'linear', but DecoderLM uses plain RoPE"),
    (tiny_llama(rms_norm_eps=1e-5), "rms_norm_eps=1e-05, but DecoderLM's RMSNorm eps is 1e-06"),
    (tiny_llama(attention_bias=True), "attention_bias/mlp_bias=True, but DecoderLM has no biases"),
    (tiny_llama(hidden_act="gelu"), "hidden_act='gelu', but DecoderLM's MLP is SwiGLU"),
    (tiny_llama(attention_dropout=0.1), "attention_dropout=0.1, but DecoderLM has no dropout"),
    (transformers.Qwen2Config(hidden_size=16, num_attention_heads=2, num_key_value_heads=2),
     "Qwen2 has q/k/v biases and DecoderLM has no biases .*use a LlamaConfig of the same sizes"),
])
def test_configs_our_architecture_lacks_are_refused_with_the_reason(config, message):
    with pytest.raises(InputError, match=f"^cannot build a DecoderLM from a (Llama|Qwen2)Config: {message}"):
        decoder_config_from_hf(config)


def test_bad_input_is_one_clear_line(tmp_path):
    (tmp_path / "broken.json").write_text("{not json")
    cases = [
        (tmp_path / "nowhere", "no Hugging Face config at .*nowhere: give a config.json or a directory holding one"),
        (tmp_path / "broken.json", "cannot read the Hugging Face config .*broken.json"),
        ({"model_type": "gpt2"}, "a dict has model_type 'gpt2'; DecoderLM reads llama or qwen2 configs"),
        ({"hidden_size": 16}, "a dict has model_type None"),
        (3, "config must be a transformers config, a dict or a path, got int"),
        ({"model_type": "llama", "hidden_size": 18, "num_attention_heads": 4}, "invalid Hugging Face config a dict: "
                                                                               ".*not a multiple"),
    ]
    for source, message in cases:
        with pytest.raises(InputError, match=message) as raised:
            decoder_config_from_hf(source)
        assert "\n" not in str(raised.value)
    with pytest.raises(InputError, match="unknown DecoderConfig field.* gama; fields are"):
        decoder_config_from_hf(tiny_llama(), gama=1.0)
    with pytest.raises(InputError, match="LlamaConfig needs d_model divisible by n_heads, got d_model=18, n_heads=4"):
        llama_config(DecoderConfig(vocab_size=10, d_model=18, n_heads=4))


def test_paper_preset_has_the_parameters_its_shapes_give():
    d, layers, inner, mlp, vocab = 1024, 24, 16 * 96, 4096, 60416
    per_block = 4 * d * inner + 3 * d * mlp + 2 * d  # W_Q, W_K, W_V, W_O; W_gate, W_up, W_down; two norms
    expected = 2 * vocab * d + layers * per_block + d
    assert expected == 576_766_976
    run = apply_overrides(LMConfig(), {f"model.{key}": value for key, value in PAPER_0_7B.items()})
    cfg = run.decoder_config(vocab)
    assert cfg == DecoderConfig(vocab_size=vocab, max_seq_len=64, **PAPER_0_7B)
    with torch.device("meta"):  # shapes only: nothing is allocated
        ours = DecoderLM(cfg)
        theirs = transformers.LlamaForCausalLM(llama_config(cfg))
    assert sum(p.numel() for p in ours.parameters()) == expected
    assert theirs.num_parameters() == expected


def test_lm_training_builds_the_model_of_a_hugging_face_config(tmp_path):
    tiny_llama(hidden_size=24, num_attention_heads=3, head_dim=8, intermediate_size=40, num_hidden_layers=2,
               vocab_size=7).save_pretrained(tmp_path / "shape")
    cfg = apply_overrides(LMConfig(), {**TINY, "train.steps": 3, "model.hf_config": str(tmp_path / "shape")})
    run = train_lm(cfg, tmp_path / "run")
    state = Run(run).snapshot(3)
    vocab = cfg.corpus.vocab_size  # from our tokenizer, not the config's 7
    assert state["W_E"].shape == state["W_U"].shape == (vocab, 24)
    assert state["blocks.1.W_Q"].shape == (3 * 8, 24) and state["blocks.1.W_down"].shape == (24, 40)
    assert "blocks.2.W_Q" not in state
    with pytest.raises(InputError, match="no Hugging Face config at .*missing"):
        apply_overrides(LMConfig(), {"model.hf_config": str(tmp_path / "missing")})


def randomised(hf: transformers.PreTrainedModel, seed: int = 0) -> transformers.PreTrainedModel:
    """``hf`` with every weight redrawn around its scale (norm weights around 1), so that the logits are
    of order 1 and a wrongly mapped head shows far above rounding."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in hf.named_parameters():
            noise = torch.randn(p.shape, generator=generator, dtype=p.dtype)
            p.copy_(1 + 0.3 * noise if p.ndim == 1 else noise * p.shape[-1] ** -0.5 * (2 if "proj" in name else 1))
    return hf.eval()


def gqa_llama(**fields) -> transformers.LlamaForCausalLM:
    """A tiny Llama with grouped-query attention (6 query heads, 2 key/value heads), tied embeddings,
    RoPE base 500 and RMSNorm eps 1e-5: everything SmolLM2 has that the trainer's decoder does not."""
    config = tiny_llama(**{"hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 6,
                           "num_key_value_heads": 2, "head_dim": 8, "tie_word_embeddings": True, "rms_norm_eps": 1e-5,
                           "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}, **fields})
    return randomised(transformers.LlamaForCausalLM(config))


@torch.no_grad()
def test_from_hf_computes_a_grouped_query_tied_llama_with_its_rope_base_and_eps():
    hf = gqa_llama()
    hf.set_attn_implementation("eager")
    ours = from_hf(hf)
    assert (ours.cfg.n_heads, ours.cfg.rope_base, ours.cfg.rms_eps) == (6, 500.0, 1e-5)
    assert ours.blocks[0].W_K.shape == (48, 24) and not ours.training
    torch.testing.assert_close(ours.W_U, hf.model.embed_tokens.weight, atol=0, rtol=0)  # tied: a copy
    tokens = torch.randint(40, (3, 20), generator=torch.Generator().manual_seed(0))
    logits = hf(tokens).logits
    assert logits.abs().max() > 1
    torch.testing.assert_close(ours(tokens), logits, atol=1e-4, rtol=0)
    # Controls: key/value heads tiled over the query heads (0, 1, 0, 1, ...) instead of repeated for
    # each group (0, 0, 0, 1, 1, 1) are far outside the tolerance...
    wrong = from_hf(hf)
    for W, theirs in ((wrong.blocks[0].W_K, hf.model.layers[0].self_attn.k_proj.weight),
                      (wrong.blocks[0].W_V, hf.model.layers[0].self_attn.v_proj.weight)):
        W.copy_(theirs.unflatten(0, (2, 8)).repeat(3, 1, 1).flatten(0, 1))
    assert (wrong(tokens) - logits).abs().max() > 1e-2
    # ...and so are the trainer's RoPE base and epsilon.
    for field, change in (({"rope_base": 10000.0}, 1e-2), ({"rms_eps": 1e-6}, 1e-4)):
        other = DecoderLM(DecoderConfig(**{**vars(ours.cfg), **field}))
        other.load_state_dict(ours.state_dict())
        assert (other(tokens) - logits).abs().max() > change, field


def test_pretrained_configs_need_query_heads_in_equal_groups():
    assert decoder_config_from_hf(gqa_llama().config, pretrained=True).n_heads == 6
    config = tiny_llama(hidden_size=24, num_attention_heads=6, num_key_value_heads=4, head_dim=4)
    with pytest.raises(InputError, match="num_key_value_heads=4 .*does not divide the query heads into groups"):
        decoder_config_from_hf(config, pretrained=True)
    with pytest.raises(InputError, match="rope scaling 'linear'"):
        decoder_config_from_hf(tiny_llama(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}),
                               pretrained=True)
    with pytest.raises(InputError, match="rope_base must be a positive finite number"):
        DecoderConfig(vocab_size=10, rope_base=0.0)

"""The model view (SPEC §6.4, §7) on tiny random models of every supported family, in float64: the
summands add up to the stream the final norm reads, the paths add up to autograd's gradient of the
embedding (tied models through their ``unembed`` path too), the pattern is the model's own, the
value-output map equals a run of the layer's own projections, and nothing of the model changes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from family_models import FAMILIES, FLOAT64_THROUGHOUT, V, family_model

from ctxstair.errors import InputError
from ctxstair.models.view import adapter_of, supported_families, view_of
from ctxstair.models.view.adapter import heads_of
from ctxstair.theory.decoder_paths import decoder_embedding_paths


@pytest.fixture(scope="module")
def windows() -> np.ndarray:
    return np.random.default_rng(0).integers(0, V, size=(3, 12))


def relative(a, b) -> float:
    """Relative Frobenius distance of a from b (numpy or torch)."""
    a, b = (np.asarray(x.detach() if isinstance(x, torch.Tensor) else x) for x in (a, b))
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_every_family_of_the_test_has_an_adapter_and_every_adapter_is_tested():
    assert sorted(FAMILIES) == supported_families()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_summands_add_up_to_the_stream_the_final_norm_reads(family, windows):
    view = view_of(family_model(family))
    with torch.no_grad():
        run = view.forward(torch.from_numpy(windows))
    expected = ["embed"] + (["pos"] if family == "gpt2" else []) + [f"{part}.{layer}" for layer in range(2)
                                                                   for part in ("attn", "mlp")]
    assert list(run.summands) == expected
    assert relative(sum(run.summands.values()), run.stream) <= 1e-12
    # The stream is what the unembedding's input comes from, through the final norm (Gemma 2 then caps
    # the logits softly: the unembedding's output is read before that).
    model = view.model
    with torch.no_grad():
        unembedded = model.get_output_embeddings()(model.get_submodule(view.adapter.final_norm)(run.stream))
    assert relative(unembedded, run.head_output) <= 1e-12
    if not getattr(model.config, "final_logit_softcapping", None):
        assert relative(run.head_output, run.logits) <= 1e-12


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("objective", ["loss", "label"])
def test_paths_add_up_to_the_autograd_gradient_of_the_embedding(family, objective, windows):
    model = family_model(family)
    view = view_of(model)
    paths = decoder_embedding_paths(model, windows, objective)
    full = paths.pop("full")
    names = ["embed"] + [f"{part}.{layer}" for layer in range(2) for part in ("attn", "mlp")]
    assert list(paths) == names + (["unembed"] if view.tied else [])
    assert view.tied == bool(FAMILIES[family]["tie_word_embeddings"])
    tolerance = 1e-10 if family in FLOAT64_THROUGHOUT else 1e-6
    assert relative(sum(paths.values()), full) <= tolerance
    assert all(np.linalg.norm(g) > 0 for g in paths.values())  # every path carries signal here
    # The independent reference: the gradient of the objective from the model's plain forward pass.
    X = torch.from_numpy(windows)
    logits = model(input_ids=X).logits
    value = (-torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), X[:, 1:].flatten())
             if objective == "loss" else logits[:, :-1].gather(-1, X[:, 1:, None]).mean())
    (reference,) = torch.autograd.grad(value, model.get_input_embeddings().weight)
    assert relative(full, reference.numpy()) <= 1e-12
    if view.tied:  # without the output side, the paths miss a part of the shared matrix's gradient
        assert relative(sum(g for name, g in paths.items() if name != "unembed"), full) > 1e-3


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_attention_pattern_is_the_models_own(family, windows):
    model = family_model(family)
    view = view_of(model)
    implementation = model.config._attn_implementation
    pattern = view.attention_pattern(torch.from_numpy(windows))
    assert model.config._attn_implementation == implementation  # restored
    assert pattern.shape == (2, 3, 4, 12, 12)
    model.set_attn_implementation("eager")
    with torch.no_grad():
        returned = model(input_ids=torch.from_numpy(windows), output_attentions=True).attentions
    torch.testing.assert_close(pattern, torch.stack(returned), atol=1e-14, rtol=0)
    # Every family's eager softmax but GPT-2's computes in float32 whatever the model's dtype.
    rounding = 1e-12 if family == "gpt2" else 1e-6
    torch.testing.assert_close(pattern.sum(-1), torch.ones(2, 3, 4, 12, dtype=torch.float64), atol=rounding, rtol=0)
    assert pattern.triu(1).abs().max() == 0  # causal
    assert (pattern.max(-1).values > 0.5).any()  # far from uniform: the test can see a wrong pattern


def _value_output_by_running(family: str, attention: torch.nn.Module, config, w: torch.Tensor) -> torch.Tensor:
    """z = W_O W_V w by calling the layer's own projections, bias removed by subtracting the output at 0:
    (k, d) rows -> (k, d)."""
    def linear(module, x):
        return module(x) - module(torch.zeros_like(x))

    heads, kv_heads, head_dim = heads_of(config)
    k = w.shape[0]
    if family == "gpt_neox":
        values = linear(attention.query_key_value, w).view(k, heads, 3 * head_dim)[..., 2 * head_dim:]
        return linear(attention.dense, values.reshape(k, -1))
    if family == "gpt2":
        values = linear(attention.c_attn, w)[:, 2 * config.hidden_size:]
        return linear(attention.c_proj, values)
    values = linear(attention.v_proj, w).view(k, kv_heads, head_dim)
    values = values.repeat_interleave(heads // kv_heads, dim=1)  # each query head reads its group's values
    return linear(attention.o_proj, values.reshape(k, -1))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_value_output_map_equals_a_run_of_the_layers_projections(family):
    model = family_model(family)
    view = view_of(model)
    w = view.embedding.detach()[:10]
    for layer in range(view.n_layers):
        W_V, W_O = view.value_output(layer)
        attention = view.blocks[layer].get_submodule(view.adapter.attention)
        with torch.no_grad():
            expected = _value_output_by_running(family, attention, model.config, w)
        torch.testing.assert_close(w @ W_V.T @ W_O.T, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_measuring_changes_nothing_of_the_model(family, windows):
    model = family_model(family).train()
    embedding = model.get_input_embeddings().weight
    embedding.requires_grad_(False)  # a frozen embedding is measured, and stays frozen
    state = {name: value.clone() for name, value in model.state_dict().items()}
    decoder_embedding_paths(model, windows)
    view_of(model).attention_pattern(torch.from_numpy(windows))
    assert model.training and not embedding.requires_grad
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(value, state[name]) for name, value in model.state_dict().items())


def test_a_family_without_an_adapter_is_refused_in_one_line_naming_how_to_add_one():
    config = transformers.AutoConfig.for_model("bloom", vocab_size=V, hidden_size=16, n_layer=1, n_head=2)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with pytest.raises(InputError) as refused:
        view_of(model)
    message = str(refused.value)
    assert "\n" not in message and "'bloom'" in message and "gpt_neox" in message
    assert "src/ctxstair/models/view/families/" in message
    with pytest.raises(InputError, match="bloom"):
        adapter_of(config)


def test_a_module_that_is_not_a_hugging_face_causal_lm_has_no_view():
    with pytest.raises(InputError, match="Linear is not a Hugging Face causal LM") as refused:
        view_of(torch.nn.Linear(3, 3))
    assert "\n" not in str(refused.value)

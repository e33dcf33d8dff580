"""The ``transformers`` causal LMs that ``lm train`` builds (ctxstair.models.causal_lm, SPEC §4-5) and
the path decomposition of their embedding gradient with its early-training direct-path prediction
from the next-token signature (ctxstair.theory.decoder_paths, SPEC §6.4), on every family the
trainer builds: γ-init by role, the config's refusals, the state a snapshot holds, and theory =
autograd. The signature itself is tested in tests/signatures/test_corpus_scale.py, the view's summands,
patterns and value-output maps in tests/models/test_view.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from family_models import FAMILIES, FLOAT64_THROUGHOUT, family_model

from ctxstair.config import GAMMA_COMPONENTS, apply_overrides
from ctxstair.config.lm import LMConfig, LMModelConfig
from ctxstair.errors import InputError
from ctxstair.models import causal_lm, next_token_loss
from ctxstair.models.view import adapter_of, view_of
from ctxstair.signatures import next_token_occurrence, next_token_signature
from ctxstair.theory.decoder_paths import decoder_embedding_paths, direct_path_prediction

BUILT = causal_lm.trainable_families()
#: A different γ per role, so that a matrix drawn with another role's γ is off by a factor of 2 or more.
GAMMAS = {"embedding": 0.5, "unembedding": 0.75, "qk": 1.0, "ov": 1.25, "mlp": 1.5}
#: Every part of every matrix has at least 64 × 64 entries: its realised std is within 5 % of the
#: intended one by more than four standard errors.
SIZES = {"d_model": 64, "n_layers": 1, "n_heads": 4, "head_dim": 16, "d_mlp": 128}
VOCAB, POSITIONS = 256, 64


def built(family: str, seed: int = 0, gammas: dict | None = None, sizes: dict | None = None, vocab_size: int = VOCAB,
          positions: int = POSITIONS) -> torch.nn.Module:
    """The model ``lm train`` builds for ``family`` (float32, training mode)."""
    config = causal_lm.family_config(family, vocab_size, positions, sizes or SIZES)
    return causal_lm.build(config, gammas or GAMMAS, seed)


def relative(a, b) -> float:
    """Relative Frobenius distance of a from b."""
    return float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b)))


def tolerance(family: str) -> float:
    """How exactly two float64 computations of the same gradient agree: to float64 rounding where the
    family's code computes in float64 throughout, else to the float32 rounding of its norms."""
    return 1e-10 if family in FLOAT64_THROUGHOUT else 1e-6


def markov_windows(V: int, n: int, T: int, seed: int = 0) -> np.ndarray:
    """Windows of a sparse Markov chain: each token is followed by one of two successors (0.8 / 0.2),
    so next-token signatures differ strongly between tokens."""
    rng = np.random.default_rng(seed)
    successors = np.stack([rng.choice(V, 2, replace=False) for _ in range(V)])
    X = np.empty((n, T), dtype=np.int64)
    X[:, 0] = rng.integers(0, V, n)
    for s in range(1, T):
        X[:, s] = successors[X[:, s - 1], (rng.random(n) >= 0.8).astype(int)]
    return X


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# ---------------------------------------------------------------- (e) γ-initialization by role

def expected_parts(family: str, name: str, W: torch.Tensor) -> list[tuple[object, str, int]]:
    """``(index, role, d_in)`` of the parts of matrix ``name`` of a built model, written from each
    family's modelling code rather than read from its adapter: the embeddings (token, and GPT-2's
    positions) and an untied head by their names with d_in = d (SPEC §4); query and key ``qk``,
    value and attention output ``ov``, every other block matrix ``mlp``; GPT-NeoX's fused
    projection holds per head its query, key and value rows, GPT-2's ``Conv1D`` c_attn (in, out)
    its query, key and value columns side by side."""
    d = SIZES["d_model"]
    if name.endswith(("embed_tokens.weight", "wte.weight", "wpe.weight", "embed_in.weight")):
        return [(..., "embedding", d)]
    if name in ("lm_head.weight", "embed_out.weight"):
        return [(..., "unembedding", d)]
    if name.endswith("attention.query_key_value.weight"):  # GPT-NeoX: (H · 3 · hd, d)
        part = torch.arange(W.shape[0]).view(SIZES["n_heads"], 3, -1)
        return [(part[:, :2].flatten(), "qk", d), (part[:, 2].flatten(), "ov", d)]
    if name.endswith("attn.c_attn.weight"):  # GPT-2: (d, 3 · d), stored (in, out)
        return [((slice(None), slice(0, 2 * d)), "qk", d), ((slice(None), slice(2 * d, None)), "ov", d)]
    d_in = W.shape[0] if family == "gpt2" else W.shape[1]  # GPT-2's Conv1D stores (in, out)
    if name.endswith(("q_proj.weight", "k_proj.weight")):
        return [(..., "qk", d_in)]
    if name.endswith(("v_proj.weight", "o_proj.weight", "attention.dense.weight", "attn.c_proj.weight")):
        return [(..., "ov", d_in)]
    return [(..., "mlp", d_in)]


@pytest.mark.parametrize("family", BUILT)
def test_every_part_is_drawn_with_the_std_of_its_role(family):
    model = built(family)
    assert model.training and all(p.dtype == torch.float32 for p in model.parameters())
    mine = []
    for name, W in model.named_parameters():  # a tied head is the embedding's parameter, listed once
        if W.ndim == 2:
            mine += [(name, role, float(W.detach()[index].double().std()), float(d_in) ** -GAMMAS[role])
                     for index, role, d_in in expected_parts(family, name, W)]
    for name, role, std, target in mine:
        assert abs(std / target - 1) < 0.05, (name, role, std, target)
    for name, W in model.named_parameters():  # centred: the mean of each part within 5 standard errors
        if W.ndim == 2:
            for index, role, d_in in expected_parts(family, name, W):
                part = W.detach()[index].double()
                assert abs(float(part.mean())) < 5 * float(d_in) ** -GAMMAS[role] / part.numel() ** 0.5, name
    roles = {role for _, role, _, _ in mine}
    tied = view_of(model).tied
    assert roles == set(causal_lm.ROLES) - ({"unembedding"} if tied else set())
    # What members.csv records: the same parts, roles and stds.
    recorded = causal_lm.init_stds(model, GAMMAS)
    assert [(name, role) for name, role, _, _ in recorded] == [(name, role) for name, role, _, _ in mine]
    for (_, _, std, target), (name, _, my_std, my_target) in zip(recorded, mine):
        assert std == pytest.approx(my_std, rel=1e-9) and target == pytest.approx(my_target, rel=1e-12), name
    fused = [name for name, *_ in mine if name.endswith(("query_key_value.weight", "c_attn.weight"))]
    assert len(fused) == (2 if family in ("gpt_neox", "gpt2") else 0)  # two parts, each with its own std


@pytest.mark.parametrize("family", BUILT)
def test_norm_gains_and_biases_are_left_as_the_family_initialises_them(family):
    model = built(family)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            assert torch.count_nonzero(p) == 0, name
    # A norm's gain has effective scale 1 however the family stores it (Gemma stores 1 + w with w = 0):
    # rows of mean 0 come out as themselves over their root mean square, as LayerNorm and RMSNorm agree there.
    norms = [(name, module) for name, module in model.named_modules()
             if any(p.ndim == 1 for key, p in module.named_parameters(recurse=False) if key == "weight")]
    assert norms or family == "olmo"  # OLMo's LayerNorm has no parameters
    x = torch.randn(5, 2 * SIZES["d_model"], generator=torch.Generator().manual_seed(0))
    for name, module in norms:
        rows = x[:, : module.weight.shape[0]]
        rows = rows - rows.mean(dim=1, keepdim=True)
        with torch.no_grad():
            torch.testing.assert_close(module(rows), rows / rows.pow(2).mean(dim=1, keepdim=True).sqrt(), rtol=1e-4,
                                       atol=1e-5, msg=name)


@pytest.mark.parametrize("family", BUILT)
def test_the_seed_alone_decides_the_weights_and_building_leaves_the_global_generator_alone(family):
    state = torch.get_rng_state()
    a, b, c = built(family, seed=4), built(family, seed=4), built(family, seed=5)
    assert torch.equal(torch.get_rng_state(), state)
    matrices = []
    for (name, p), q, r in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(p, q), name
        if p.ndim == 2:
            assert not torch.equal(p, r), name
            matrices.append(p)
    # each matrix is its own draw
    assert all(not torch.equal(p, q) for i, p in enumerate(matrices) for q in matrices[:i] if p.shape == q.shape)


def test_the_papers_size_builds_the_llama_of_its_parameter_count():
    # SPEC §5: 24 layers, d 1024, 16 heads of 96, MLP 4096; the GPT-2 vocabulary of the paper's corpus.
    d, layers, inner, mlp, vocab = 1024, 24, 16 * 96, 4096, 60416
    per_block = 4 * d * inner + 3 * d * mlp + 2 * d  # query, key, value, output; gate, up, down; two norms
    expected = 2 * vocab * d + layers * per_block + d  # untied W_E and W_U; the final norm
    assert expected == 576_766_976
    sizes = {"model.d_model": d, "model.n_layers": layers, "model.n_heads": 16, "model.head_dim": 96,
             "model.d_mlp": mlp}
    config = apply_overrides(LMConfig(), sizes).model_config(vocab)
    with torch.device("meta"):  # shapes only: nothing is allocated
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert model.config.model_type == "llama" and model.num_parameters() == expected


# ---------------------------------------------------------------- the config's refusals

def refused(call) -> str:
    """The one-line InputError message of ``call()``."""
    with pytest.raises(InputError) as error:
        call()
    message = str(error.value)
    assert "\n" not in message
    return message


def test_an_unknown_family_is_refused_naming_the_families():
    message = refused(lambda: causal_lm.family_config("bloom", VOCAB, POSITIONS, SIZES))
    assert "model.family='bloom'" in message and all(family in message for family in BUILT)


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox"])
def test_heads_that_do_not_split_d_model_are_refused_for_families_whose_heads_do(family):
    message = refused(lambda: causal_lm.family_config(family, VOCAB, POSITIONS, {**SIZES, "head_dim": 8}))
    assert message.startswith("model.head_dim=8:") and "set model.head_dim=16" in message and family in message
    message = refused(lambda: causal_lm.family_config(family, VOCAB, POSITIONS, {**SIZES, "n_heads": 5}))
    assert "model.n_heads=5 does not divide model.d_model=64" in message
    # Families with a head_dim of their own take it.
    assert causal_lm.family_config("llama", VOCAB, POSITIONS, {**SIZES, "head_dim": 8}).head_dim == 8


def test_a_hugging_face_config_of_another_family_is_refused(tmp_path):
    transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2).save_pretrained(tmp_path / "gpt2")
    message = refused(lambda: causal_lm.family_config("llama", VOCAB, POSITIONS, SIZES, str(tmp_path / "gpt2")))
    assert "is a 'gpt2' config, but model.family is 'llama'" in message and "set model.family=gpt2" in message
    refused(lambda: apply_overrides(LMConfig(), {"model.hf_config": str(tmp_path / "gpt2")}))
    config = causal_lm.family_config("gpt2", VOCAB, POSITIONS, SIZES, str(tmp_path / "gpt2"))
    assert (config.n_embd, config.n_layer, config.vocab_size, config.n_positions) == (32, 1, VOCAB, POSITIONS)
    message = refused(lambda: causal_lm.family_config("llama", VOCAB, POSITIONS, SIZES, str(tmp_path / "missing")))
    assert message.startswith("model.hf_config: cannot read")


# ---------------------------------------------------------------- the state a snapshot holds

@pytest.mark.parametrize("family", BUILT)
def test_a_state_holds_a_tied_weight_once_and_loads_back(family):
    model = built(family, sizes={**SIZES, "d_model": 16, "head_dim": 4, "d_mlp": 32}, vocab_size=40)
    state = causal_lm.state_of(model)
    tied = view_of(model).tied
    embedding = LMModelConfig(family=family).embedding_key()  # the key lm train's snapshots name
    assert state[embedding] is model.get_input_embeddings().weight
    assert len(state) == len(model.state_dict()) - tied
    assert len({id(t) for t in state.values()}) == len(state)
    other = built(family, seed=1, sizes={**SIZES, "d_model": 16, "head_dim": 4, "d_mlp": 32}, vocab_size=40)
    assert causal_lm.load_state(other, {k: v.detach().clone() for k, v in state.items()}, "here") is other
    assert all(torch.equal(value, state[name]) for name, value in causal_lm.state_of(other).items())
    assert view_of(other).tied == tied  # a tied head still is the embedding
    X = torch.from_numpy(markov_windows(40, 2, 8))
    with torch.no_grad():
        assert torch.equal(other.eval()(input_ids=X).logits, model.eval()(input_ids=X).logits)


def test_a_state_of_another_family_or_shape_is_refused_in_one_line():
    small = {**SIZES, "d_model": 16, "head_dim": 4, "d_mlp": 32}
    llama = causal_lm.state_of(built("llama", sizes=small, vocab_size=40))
    message = refused(lambda: causal_lm.load_state(built("gpt_neox", sizes=small, vocab_size=40), llama, "snap"))
    assert message.startswith("snap is not the whole state of the gpt_neox model its run describes")
    wider = causal_lm.state_of(built("llama", sizes={**small, "d_mlp": 48}, vocab_size=40))
    message = refused(lambda: causal_lm.load_state(built("llama", sizes=small, vocab_size=40), wider, "snap"))
    assert "0 tensors missing, 3 of another shape, 0 unknown" in message  # gate, up, down
    message = refused(lambda: causal_lm.load_state(built("llama", sizes=small, vocab_size=40),
                                                   {**llama, "W_E": llama["model.embed_tokens.weight"]}, "snap"))
    assert "1 unknown; W_E, which the model does not have" in message


# ---------------------------------------------------------------- (a), (b) path decomposition = autograd

def detached_route_gradient(model: torch.nn.Module, X: torch.Tensor, objective: str, keep: str) -> np.ndarray:
    """∇_{W_E} of ``objective`` when the final norm reads the sum of the stream's summands with every one
    but ``keep`` detached, and (unless ``keep`` is ``unembed``) the head's weight is detached too, so
    that only the routes through ``keep`` reach W_E. The summands are the outputs of the modules the
    family's adapter names, read by forward hooks of this test."""
    adapter = adapter_of(model.config)
    summands: dict[str, torch.Tensor] = {}

    def capture(name):
        def hook(module, args, output):
            summands[name] = output[0] if isinstance(output, tuple) else output
        return hook

    def stream_of_keep(module, args):
        return (sum(s if name == keep else s.detach() for name, s in summands.items()), *args[1:])

    def head_without_its_weight(module, args, output):
        return torch.nn.functional.linear(args[0], module.weight.detach(), module.bias)

    plan = [("embed", model.get_input_embeddings())]
    if adapter.positions:
        plan.append(("pos", model.get_submodule(adapter.positions)))
    for layer, block in enumerate(model.get_submodule(adapter.blocks)):
        plan += [(f"attn.{layer}", block.get_submodule(adapter.attention_summand)),
                 (f"mlp.{layer}", block.get_submodule(adapter.mlp_summand))]
    handles = [module.register_forward_hook(capture(name)) for name, module in plan]
    handles.append(model.get_submodule(adapter.final_norm).register_forward_pre_hook(stream_of_keep))
    if keep != "unembed":
        handles.append(model.get_output_embeddings().register_forward_hook(head_without_its_weight))
    try:
        logits = model(input_ids=X).logits
    finally:
        for handle in handles:
            handle.remove()
    value = -next_token_loss(logits, X) if objective == "loss" else logits[:, :-1].gather(-1, X[:, 1:, None]).mean()
    (gradient,) = torch.autograd.grad(value, model.get_input_embeddings().weight)
    return gradient.numpy()


def gamma_initialised(family: str) -> torch.nn.Module:
    """The model lm train builds at γ = 0.5, tiny (V = 13, d = 16), in float64: every path carries
    a real share of the gradient."""
    sizes = {"d_model": 16, "n_layers": 2, "n_heads": 2, "head_dim": 8, "d_mlp": 48}
    return built(family, gammas=dict.fromkeys(causal_lm.ROLES, 0.5), sizes=sizes, vocab_size=13,
                 positions=16).double().eval()


@pytest.mark.parametrize("family", BUILT)
@pytest.mark.parametrize("weights", ["γ-init", "random"])
@pytest.mark.parametrize("objective", ["loss", "label"])
def test_paths_sum_to_the_full_gradient_and_each_is_its_detached_route(family, weights, objective):
    # The γ-initialised model as lm train builds it (untied but for the families that ship tied), and
    # the view tests' models (tests/helpers/family_models.py: noisy norm gains and biases, tied as each family
    # ships its checkpoints, Qwen2 among them).
    model = gamma_initialised(family) if weights == "γ-init" else family_model(family)
    V, d = model.get_input_embeddings().weight.shape
    X = markov_windows(V, 10, 7)
    paths = decoder_embedding_paths(model, X, objective)
    names = ["embed", "attn.0", "mlp.0", "attn.1", "mlp.1"]
    tied = view_of(model).tied
    assert tied == (family in ("gpt2", "gemma", "gemma2", "smollm3") if weights == "γ-init"
                    else FAMILIES[family]["tie_word_embeddings"])
    assert list(paths) == names + (["unembed"] if tied else []) + ["full"]
    full = paths.pop("full")
    assert all(p.dtype == np.float64 and p.shape == (V, d) for p in paths.values())
    assert relative(sum(paths.values()), full) <= tolerance(family)
    for name, path in paths.items():
        if weights == "γ-init":  # every path carries a real share, so a wrong split could not hide in the sum
            assert np.linalg.norm(path) > 0.03 * np.linalg.norm(full), name
        # (the random models' large blocks leave the embed path about 3 % of the gradient: checked alone here)
        expected = detached_route_gradient(model, torch.from_numpy(X), objective, name)
        assert relative(path, expected) <= tolerance(family), name
    assert all(p.grad is None for p in model.parameters())  # left untouched


@pytest.mark.parametrize("family", BUILT)
def test_the_full_path_is_minus_the_models_own_loss_gradient(family):
    model, X = family_model(family, seed=2), torch.from_numpy(markov_windows(64, 8, 8, seed=3))
    full = decoder_embedding_paths(model, X.numpy())["full"]
    next_token_loss(model(input_ids=X).logits, X).backward()
    assert relative(full, -model.get_input_embeddings().weight.grad.numpy()) <= 1e-12


def test_paths_refuse_bad_input():
    model = family_model("llama")
    with pytest.raises(InputError, match="unknown objective"):
        decoder_embedding_paths(model, markov_windows(64, 2, 5), "prediction")
    with pytest.raises(InputError, match="T >= 2"):
        decoder_embedding_paths(model, np.zeros((2, 1), dtype=np.int64))
    with pytest.raises(InputError, match="0..63"):
        decoder_embedding_paths(model, np.full((2, 3), 64))


@pytest.mark.parametrize("family", BUILT)
def test_the_attention_the_view_reads_computes_the_network_the_model_trains_with(family):
    """The model trains and its paths are taken under its default attention (PyTorch's fused kernel where
    the family allows it); the patterns are read under eager attention, which computes softmax(q kᵀ) v
    itself: the two must be one network."""
    model = family_model(family)
    X = torch.from_numpy(markov_windows(64, 6, 9))
    results = []
    for implementation in (model.config._attn_implementation, "eager"):  # Gemma 2's own is eager already
        model.set_attn_implementation(implementation)
        logits = model(input_ids=X).logits
        (gradient,) = torch.autograd.grad(next_token_loss(logits, X), model.get_input_embeddings().weight)
        results.append((logits.detach(), gradient))
    # GPT-2's eager softmax keeps float64; every other family's computes in float32.
    rounding = 1e-12 if family == "gpt2" else 1e-5
    for fused, explicit in zip(*results):
        torch.testing.assert_close(fused, explicit, atol=rounding * explicit.abs().max().item(), rtol=0)


# ---------------------------------------------------------------- (d) direct-path prediction

#: γ at which the blocks' writes are negligible against the embedding. γ = 2: the pre-norms undo the
#: embeddings' small scale before attention reads them, so attention outputs over embeddings scale like
#: d^{1-γ}, not d^{-γ}; at γ = 1.5 the cosine is ≈ 0.99 only. Gemma 2 normalises each block's output
#: again before adding it (post-sublayer norms of gain 1), so its writes are of unit size whatever γ
#: unless their variance is below the norm's ε: there γ = 4.
SMALL_INIT_GAMMA = {"gemma2": 4.0}


def write_nothing(model: torch.nn.Module, family: str) -> None:
    """Zero the attention output projection and the MLP output projection (weights and biases) of every
    block, named from each family's modelling code."""
    attention_output = {"gpt_neox": "attention.dense", "gpt2": "attn.c_proj"}.get(family, "self_attn.o_proj")
    mlp_output = {"gpt_neox": "mlp.dense_4h_to_h", "gpt2": "mlp.c_proj"}.get(family, "mlp.down_proj")
    with torch.no_grad():
        for block in view_of(model).blocks:
            for name in (attention_output, mlp_output):
                for p in block.get_submodule(name).parameters():
                    p.zero_()


def without_positions(model: torch.nn.Module) -> torch.nn.Module:
    """GPT-2 with its position embeddings zeroed: the prediction reads the embedding summand alone, and
    under one embedding γ the positions are as large as W_E."""
    if model.config.model_type == "gpt2":
        with torch.no_grad():
            model.transformer.wpe.weight.zero_()
    return model


@pytest.mark.parametrize("family", BUILT)
@pytest.mark.parametrize("objective", ["loss", "label"])
def test_direct_path_prediction_is_exact_when_blocks_write_nothing(family, objective):
    # With every block's output projections 0 the stream is the embedding exactly: the docstring's
    # assumption holds at any scale, so with the test models' weights (softmax far from uniform,
    # non-unit norm weights, biases) the formula must equal the autograd direct path to rounding.
    model, V = without_positions(family_model(family)), 64
    write_nothing(model, family)
    X = markov_windows(V, 12, 7, seed=6)
    with torch.no_grad():  # post-sublayer norms (OLMo-2, Gemma 2) of a zero output write zero too
        summands = view_of(model).forward(torch.from_numpy(X)).summands
    assert all(torch.count_nonzero(s) == 0 for name, s in summands.items() if name not in ("embed", "pos"))
    measured = decoder_embedding_paths(model, X, objective)["embed"]
    predicted = direct_path_prediction(model, next_token_occurrence(X, V), next_token_signature(X, V), objective)
    assert np.abs(measured).max() > 0
    assert relative(predicted, measured) <= tolerance(family)


@pytest.mark.parametrize("family", BUILT)
@pytest.mark.parametrize("d", [16, 32])
@pytest.mark.parametrize("objective", ["loss", "label"])
def test_direct_path_prediction_matches_embed_path_at_small_init(family, d, objective):
    V = 13
    gamma = SMALL_INIT_GAMMA.get(family, 2.0)
    sizes = {"d_model": d, "n_layers": 2, "n_heads": 2, "head_dim": d // 2, "d_mlp": 3 * d}
    model = without_positions(built(family, seed=1, gammas=dict.fromkeys(causal_lm.ROLES, gamma), sizes=sizes,
                                    vocab_size=V, positions=16).double().eval())
    X = markov_windows(V, 20, 8)
    measured = decoder_embedding_paths(model, X, objective)["embed"]
    r_nt, phi_nt = next_token_occurrence(X, V), next_token_signature(X, V)
    seen = r_nt > 0
    predicted = direct_path_prediction(model, r_nt, phi_nt, objective)
    assert row_cosines(predicted[seen], measured[seen]).min() >= 0.99
    ratio = np.linalg.norm(predicted[seen], axis=1) / np.linalg.norm(measured[seen], axis=1)
    assert np.abs(ratio - 1).max() < 0.1  # the size too, not just the direction (exact: test above)
    np.testing.assert_array_equal(predicted[~seen], 0)
    # The signature of shuffled windows (same tokens, other successors) predicts clearly worse.
    shuffled = np.random.default_rng(5).permuted(X, axis=1)
    r_sh, phi_sh = next_token_occurrence(shuffled, V), next_token_signature(shuffled, V)
    wrong = direct_path_prediction(model, r_sh, phi_sh, objective)
    assert np.median(row_cosines(wrong[seen], measured[seen])) < 0.8
    # a token subset gives the matching rows
    subset = np.flatnonzero(seen)[:4]
    phi_sub = next_token_signature(X, V, tokens=subset)
    np.testing.assert_allclose(direct_path_prediction(model, r_nt, phi_sub, objective, tokens=subset),
                               predicted[subset], rtol=1e-13, atol=0)


def test_direct_path_prediction_checks_shapes():
    with pytest.raises(InputError, match="phi_nt"):
        direct_path_prediction(family_model("llama"), np.ones(64) / 64, np.ones((64, 12)))


def test_the_decoder_roles_are_the_configs_gamma_components():
    # causal_lm sits below config (and config loads no torch), so each spells the names once; they
    # must agree, or a `model.init.<role>` would set nothing.
    assert causal_lm.ROLES == GAMMA_COMPONENTS

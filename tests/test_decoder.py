"""The decoder LM (SPEC §4-5) and the path decomposition of the embedding gradient with its
early-training direct-path prediction from the next-token signature (SPEC §6.4). The signature
itself is tested in tests/test_corpus_signatures.py."""

import numpy as np
import pytest
import torch

from ctxstair.errors import InputError
from ctxstair.models.decoder import DecoderConfig, DecoderLM, next_token_loss
from ctxstair.signatures import next_token_occurrence, next_token_signature
from ctxstair.theory.decoder_paths import decoder_embedding_paths, direct_path_prediction


def tiny(V=13, d=12, gamma=0.5, seed=0, **kw):
    cfg = DecoderConfig(V, d_model=d, n_layers=2, n_heads=2, head_dim=6, d_mlp=3 * d, max_seq_len=16, gamma=gamma,
                        seed=seed, **kw)
    return DecoderLM(cfg, dtype=torch.float64)


def markov_windows(V, n, T, seed=0):
    """Windows of a sparse Markov chain: each token is followed by one of two successors (0.8 / 0.2),
    so next-token signatures differ strongly between tokens."""
    rng = np.random.default_rng(seed)
    successors = np.stack([rng.choice(V, 2, replace=False) for _ in range(V)])
    X = np.empty((n, T), dtype=np.int64)
    X[:, 0] = rng.integers(0, V, n)
    for s in range(1, T):
        X[:, s] = successors[X[:, s - 1], (rng.random(n) >= 0.8).astype(int)]
    return X


def row_cosines(a, b):
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# ---------------------------------------------------------------- (e) γ-initialization

def test_realised_stds_are_d_in_to_minus_gamma_per_component():
    cfg = DecoderConfig(200, d_model=64, n_layers=2, n_heads=4, head_dim=16, d_mlp=256, gamma=0.75,
                        gamma_embedding=1.0, gamma_mlp=0.5, gamma_ov=1.25, seed=3)
    model = DecoderLM(cfg)
    assert model.W_E.dtype == torch.float32
    # d_in by hand: the embedding width for W_E and W_U (SPEC §4), H·hd = 64 for W_O, d_mlp for W_down
    expected = {"W_E": 64 ** -1.0, "W_U": 64 ** -0.75, "ln_final.weight": None}
    for layer in range(2):
        b = f"blocks.{layer}."
        expected |= {b + "W_Q": 64 ** -0.75, b + "W_K": 64 ** -0.75, b + "W_V": 64 ** -1.25, b + "W_O": 64 ** -1.25,
                     b + "W_gate": 64 ** -0.5, b + "W_up": 64 ** -0.5, b + "W_down": 256 ** -0.5,
                     b + "ln_attn.weight": None, b + "ln_mlp.weight": None}
    params = dict(model.named_parameters())
    assert set(params) == set(expected)
    matrices = {k for k, v in expected.items() if v is not None}
    assert model.target_stds() == pytest.approx({k: expected[k] for k in matrices}, rel=1e-12)
    realised = model.init_stds()
    assert set(realised) == matrices
    for name in matrices:
        W = params[name].detach().double()
        assert realised[name] == pytest.approx(float(W.std()), rel=1e-12)
        assert abs(realised[name] / expected[name] - 1) < 0.05, name
        assert abs(float(W.mean())) < 5 * expected[name] / W.numel() ** 0.5, name
    for name in set(expected) - matrices:
        assert torch.equal(params[name], torch.ones(64)), name


def test_same_seed_same_weights_and_seed_matters():
    a, b, c = tiny(seed=4), tiny(seed=4), tiny(seed=5)
    for (name, p), q, r in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(p, q), name
        if p.ndim == 2:
            assert not torch.equal(p, r), name
    # each matrix is its own draw
    assert not torch.equal(a.blocks[0].W_Q, a.blocks[0].W_K)


@pytest.mark.parametrize("kwargs,needle", [
    ({"head_dim": 7}, "head_dim must be even"),
    ({"n_layers": 0}, "n_layers must be a positive integer"),
    ({"gamma_qk": float("nan")}, "γ of qk"),
])
def test_bad_config_raises_input_error(kwargs, needle):
    with pytest.raises(InputError, match=needle):
        DecoderConfig(10, **kwargs)


def test_window_longer_than_max_seq_len_is_refused():
    with pytest.raises(InputError, match="max_seq_len"):
        tiny()(torch.zeros(2, 17, dtype=torch.long))


# ---------------------------------------------------------------- forward, contributions, patterns

def test_forward_is_unembedded_sum_of_contributions_and_patterns_are_causal():
    model, X = tiny(), torch.from_numpy(markov_windows(13, 5, 9))
    contributions = model.residual_contributions(X)
    assert list(contributions) == ["embed", "attn.0", "mlp.0", "attn.1", "mlp.1"]
    assert all(c.shape == (5, 9, 12) for c in contributions.values())
    torch.testing.assert_close(contributions["embed"], model.W_E[X], rtol=0, atol=0)
    logits = model(X)
    assert logits.shape == (5, 9, 13)
    assert torch.equal(logits, model.logits_from_stream(sum(contributions.values())))
    pattern = model.attention_pattern(X)
    assert pattern.shape == (2, 5, 2, 9, 9)
    torch.testing.assert_close(pattern.sum(-1), torch.ones(2, 5, 2, 9, dtype=torch.float64))
    assert torch.count_nonzero(pattern.triu(1)) == 0


def reference_logits(model, x):
    """Logits (T, V) of one window x (T,), written position by position from the architecture's
    definition: pre-norm RMSNorm (eps 1e-6), RoPE rotating coordinate pairs (i, i + hd/2) by
    s · 10000^{-2i/hd}, causal softmax(q·k/√hd), SwiGLU W_down (silu(W_gate h) ⊙ W_up h)."""
    P = {k: v.detach().numpy() for k, v in model.named_parameters()}
    H, hd, T = model.cfg.n_heads, model.cfg.head_dim, len(x)

    def rms(v, g):
        return g * v / np.sqrt(np.mean(v**2) + 1e-6)

    def rotate(v, s):  # v (hd,) at position s
        out = v.copy()
        for i in range(hd // 2):
            angle = s * 10000.0 ** (-2 * i / hd)
            c, sn = np.cos(angle), np.sin(angle)
            out[i], out[i + hd // 2] = c * v[i] - sn * v[i + hd // 2], sn * v[i] + c * v[i + hd // 2]
        return out

    stream = [P["W_E"][t].copy() for t in x]
    for layer in range(model.cfg.n_layers):
        b = f"blocks.{layer}."
        h = [rms(v, P[b + "ln_attn.weight"]) for v in stream]
        q, k, v = ([(P[b + W] @ hs).reshape(H, hd) for hs in h] for W in ("W_Q", "W_K", "W_V"))
        attn = []
        for s in range(T):
            heads = []
            for j in range(H):
                z = np.array([rotate(q[s][j], s) @ rotate(k[t][j], t) / np.sqrt(hd) for t in range(s + 1)])
                a = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
                heads.append(sum(a[t] * v[t][j] for t in range(s + 1)))
            attn.append(P[b + "W_O"] @ np.concatenate(heads))
        stream = [u + a for u, a in zip(stream, attn)]
        h = [rms(u, P[b + "ln_mlp.weight"]) for u in stream]
        gate = [P[b + "W_gate"] @ hs for hs in h]
        stream = [u + P[b + "W_down"] @ (g / (1 + np.exp(-g)) * (P[b + "W_up"] @ hs))
                  for u, g, hs in zip(stream, gate, h)]
    return np.stack([P["W_U"] @ rms(u, P["ln_final.weight"]) for u in stream])


def test_forward_equals_position_by_position_reference():
    model = tiny(gamma=0.4, seed=6)
    with torch.no_grad():  # non-trivial norm weights, so a misplaced norm weight would show
        for i, p in enumerate(p for p in model.parameters() if p.ndim == 1):
            p.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(i))
    X = markov_windows(13, 2, 6, seed=4)
    logits = model(torch.from_numpy(X)).detach().numpy()
    for i in range(len(X)):
        np.testing.assert_allclose(logits[i], reference_logits(model, X[i]), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- (c) causality and RoPE

def test_later_tokens_do_not_change_earlier_logits():
    model, X = tiny(), torch.from_numpy(markov_windows(13, 4, 9))
    changed = X.clone()
    changed[:, 5] = (changed[:, 5] + 1) % 13
    before, after = model(X).detach(), model(changed).detach()
    torch.testing.assert_close(after[:, :5], before[:, :5], rtol=1e-13, atol=1e-13)
    assert (after[:, 5:] - before[:, 5:]).abs().amax(dim=(0, 2)).min() > 1e-6  # every later position moves


def test_rope_scores_depend_on_relative_offsets_only():
    # Layer 0 reads the embeddings only, so its score z(s, t) depends on the tokens at s and t and,
    # through RoPE, on s - t alone. Post-softmax, A[s, t] / A[s, s] = exp(z(s, t) - z(s, s)): it must
    # not change when the same content is shifted right by k positions.
    model, k = tiny(gamma=0.3), 3
    A_win = torch.from_numpy(markov_windows(13, 3, 7, seed=1))
    shifted = torch.cat([torch.from_numpy(markov_windows(13, 3, k, seed=2)), A_win], dim=1)  # (3, 10)
    first = model.attention_pattern(A_win)[0].detach()  # (n, H, 7, 7)
    second = model.attention_pattern(shifted)[0].detach()[:, :, k:, k:]
    for P in (first, second):
        P.div_(torch.diagonal(P, dim1=-2, dim2=-1)[..., None])
    torch.testing.assert_close(second.tril(), first.tril(), rtol=1e-10, atol=0)
    # ... and positions do matter: a window of one repeated token has equal content everywhere, so
    # without RoPE every row would be uniform; with it, row s depends on the offsets 0..s only.
    same = model.attention_pattern(torch.full((1, 9), 4))[0, 0].detach()  # (H, 9, 9)
    assert (same[:, 8, :] - 1 / 9).abs().max() > 1e-3
    offsets_row8 = same[:, 8, 8 - torch.arange(6)] / same[:, 8, 8:9]
    offsets_row5 = same[:, 5, 5 - torch.arange(6)] / same[:, 5, 5:6]
    torch.testing.assert_close(offsets_row8, offsets_row5, rtol=1e-10, atol=0)


# ---------------------------------------------------------------- (a), (b) path decomposition

@pytest.mark.parametrize("objective", ["loss", "label"])
def test_paths_sum_to_full_gradient_and_each_is_its_detached_route(objective):
    model, X = tiny(gamma=0.5), markov_windows(13, 10, 7)
    paths = decoder_embedding_paths(model, X, objective)
    names = ["embed", "attn.0", "mlp.0", "attn.1", "mlp.1"]
    assert list(paths) == names + ["full"]
    assert all(p.dtype == np.float64 and p.shape == (13, 12) for p in paths.values())
    full = paths["full"]
    np.testing.assert_allclose(sum(paths[k] for k in names), full, rtol=1e-10, atol=1e-12 * np.abs(full).max())
    for name in names:  # every path carries a real share, so a wrong split could not hide
        assert np.linalg.norm(paths[name]) > 0.03 * np.linalg.norm(full), name
    # Path j = gradient of the objective with every other summand of the final stream detached.
    Xt = torch.from_numpy(X)
    for name in names:
        contributions = model.residual_contributions(Xt)
        stream = sum(c if key == name else c.detach() for key, c in contributions.items())
        logits = model.logits_from_stream(stream)
        value = (-next_token_loss(logits, Xt) if objective == "loss"
                 else logits[:, :-1].gather(-1, Xt[:, 1:, None]).mean())
        (expected,) = torch.autograd.grad(value, model.W_E)
        np.testing.assert_allclose(paths[name], expected.numpy(), rtol=1e-10, atol=1e-13 * np.abs(full).max())
    assert model.W_E.grad is None  # left untouched


def test_full_path_is_minus_the_models_own_loss_gradient():
    model, X = tiny(gamma=0.5, seed=2), markov_windows(13, 8, 8, seed=3)
    full = decoder_embedding_paths(model, X)["full"]
    Xt = torch.from_numpy(X)
    logits = model(Xt)
    torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 13), Xt[:, 1:].reshape(-1)).backward()
    np.testing.assert_allclose(full, -model.W_E.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_paths_refuse_bad_input():
    model = tiny()
    with pytest.raises(InputError, match="unknown objective"):
        decoder_embedding_paths(model, markov_windows(13, 2, 5), "prediction")
    with pytest.raises(InputError, match="T >= 2"):
        decoder_embedding_paths(model, np.zeros((2, 1), dtype=np.int64))
    with pytest.raises(InputError, match="0..12"):
        decoder_embedding_paths(model, np.full((2, 3), 13))


# ---------------------------------------------------------------- (d) direct-path prediction

@pytest.mark.parametrize("d", [16, 32])
@pytest.mark.parametrize("objective", ["loss", "label"])
def test_direct_path_prediction_matches_embed_path_at_small_init(d, objective):
    # γ = 2: RMSNorm undoes the embeddings' small scale before attention reads them, so attention
    # outputs over embeddings scale like d^{1-γ}, not d^{-γ}; at γ = 1.5 the cosine is ≈ 0.99 only.
    V = 13
    model, X = tiny(V=V, d=d, gamma=2.0, seed=1), markov_windows(V, 20, 8)
    measured = decoder_embedding_paths(model, X, objective)["embed"]
    r_nt, phi_nt = next_token_occurrence(X, V), next_token_signature(X, V)
    seen = r_nt > 0
    predicted = direct_path_prediction(model, r_nt, phi_nt, objective)
    assert row_cosines(predicted[seen], measured[seen]).min() >= 0.99
    ratio = np.linalg.norm(predicted[seen], axis=1) / np.linalg.norm(measured[seen], axis=1)
    assert np.abs(ratio - 1).max() < 0.1  # the size too, not just the direction (exact: test below)
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


@pytest.mark.parametrize("objective", ["loss", "label"])
def test_direct_path_prediction_is_exact_when_blocks_write_nothing(objective):
    # With W_O = W_down = 0 the stream is the embedding exactly: the docstring's assumption holds at
    # any scale, so at γ = 0.5 (softmax far from uniform, non-unit norm weights) the formula must
    # equal the autograd direct path to rounding.
    V = 13
    model, X = tiny(V=V, d=16, gamma=0.5, seed=2), markov_windows(V, 12, 7, seed=6)
    with torch.no_grad():
        for block in model.blocks:
            block.W_O.zero_()
            block.W_down.zero_()
        model.ln_final.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(0))
    measured = decoder_embedding_paths(model, X, objective)["embed"]
    predicted = direct_path_prediction(model, next_token_occurrence(X, V), next_token_signature(X, V), objective)
    np.testing.assert_allclose(predicted, measured, rtol=1e-10, atol=1e-14 * np.abs(measured).max())


def test_direct_path_prediction_checks_shapes():
    with pytest.raises(InputError, match="phi_nt"):
        direct_path_prediction(tiny(), np.ones(13) / 13, np.ones((13, 12)))


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_fused_attention_equals_the_explicit_softmax_path(dtype, tol):
    """Training uses PyTorch's fused causal attention; the pattern path computes softmax(q k^T) v itself."""
    cfg = DecoderConfig(17, d_model=16, n_layers=2, n_heads=2, head_dim=6, d_mlp=48, max_seq_len=16, gamma=0.25)
    model = DecoderLM(cfg, dtype=dtype)
    X = torch.as_tensor(markov_windows(17, 6, 9))
    fused, none = model._run(X)
    explicit, patterns = model._run(X, with_patterns=True)
    assert none == [None] * len(model.blocks) and all(p.shape == (6, 2, 9, 9) for p in patterns)
    for name in fused:  # relative to each tensor's scale: the layers reach values of order 10 here
        torch.testing.assert_close(fused[name], explicit[name], atol=tol * explicit[name].abs().max().item(), rtol=0)
    loss = next_token_loss(model(X), X)
    (grad,) = torch.autograd.grad(loss, model.W_E)
    reference = next_token_loss(model.logits_from_stream(sum(explicit.values())), X)
    (grad_explicit,) = torch.autograd.grad(reference, model.W_E)
    torch.testing.assert_close(grad, grad_explicit, atol=tol * grad_explicit.abs().max().item(), rtol=0)

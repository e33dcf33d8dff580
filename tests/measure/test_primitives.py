"""Tests for ctxstair.measure.primitives (SPEC §7): each one checks a fact that could be false."""

from __future__ import annotations

import numpy as np
import pytest

from ctxstair.alignment import compare, cosine_matrix
from ctxstair.errors import InputError
from ctxstair.measure.primitives import (
    attention_path_correlation,
    attention_path_counts,
    attention_path_scores,
    attention_path_signature,
    eligible_tokens,
    path_shares,
    path_signature_of,
    prefix_labels,
    prefix_probe,
    rho_next,
    shuffled_baseline,
    token_split,
)


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def planted(rng, T=40, Y=16, C=24, noise=0.05):
    """Prefix signatures (T, Y, C) and embeddings ``φ v*`` plus a little noise, (T, Y)."""
    phi = rng.dirichlet(0.2 * np.ones(Y * C), size=T).reshape(T, Y, C)
    W = np.einsum("tyc,c->ty", phi, rng.normal(size=C))
    return phi, W + noise * W.std() * rng.normal(size=W.shape)


# --- token set and labels ------------------------------------------------------------------------


def test_eligible_tokens_are_most_frequent_word_like_ties_by_id():
    windows = np.array([[0, 1, 1, 2, 2, 3], [3, 4, 4, 4, 5, 5]])  # counts 1, 2, 2, 2, 3, 2
    word_like = np.array([True, True, True, False, True, True, False])  # id 6 never occurs
    np.testing.assert_array_equal(eligible_tokens(windows, word_like, k=3), [4, 1, 2])
    np.testing.assert_array_equal(eligible_tokens(windows, word_like, k=10), [4, 1, 2, 5, 0])


def test_eligible_tokens_refuses_a_mask_that_is_not_boolean():
    with pytest.raises(InputError, match="word_like"):
        eligible_tokens(np.zeros((1, 3), dtype=int), np.ones(4), k=2)


def test_prefix_labels_add_most_frequent_next_tokens_to_the_token_set():
    windows = np.array([[9, 0, 0, 0, 1, 1, 2]])  # next-token counts: 0 -> 3, 1 -> 2, 2 -> 1; 9 only first
    np.testing.assert_array_equal(prefix_labels(windows, np.array([2, 5]), 10, total=4), [0, 1, 2, 5])
    np.testing.assert_array_equal(prefix_labels(windows, np.array([2, 5]), 10, total=100), [0, 1, 2, 5])


# --- ρ_next --------------------------------------------------------------------------------------


def test_rho_next_equals_compare_per_snapshot(rng):
    phi = rng.dirichlet(np.ones(30), size=12)
    W = rng.normal(size=(3, 12, 5))
    rho = rho_next(W, phi)
    for s in range(3):
        ref = compare(cosine_matrix(W[s]), cosine_matrix(phi))
        assert rho["pearson"][s] == pytest.approx(ref["pearson"], abs=1e-12)
        assert rho["spearman"][s] == pytest.approx(ref["spearman"], abs=1e-12)
    assert rho_next(W[0], phi)["pearson"].shape == (1,)


def test_rho_next_is_one_for_embeddings_equal_to_the_signatures(rng):
    phi = rng.dirichlet(np.ones(8), size=10)
    assert rho_next(phi, phi)["pearson"][0] == pytest.approx(1.0)


def test_rho_next_refuses_mismatched_token_counts(rng):
    with pytest.raises(InputError, match="T = 10"):
        rho_next(rng.normal(size=(9, 4)), rng.random((10, 5)))


# --- probe ---------------------------------------------------------------------------------------


def test_token_split_is_fixed_disjoint_and_complete():
    train, heldout = token_split(200, 0.25, seed=3)
    assert heldout.size == 50 and np.intersect1d(train, heldout).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([train, heldout])), np.arange(200))
    again = token_split(200, 0.25, seed=3)
    np.testing.assert_array_equal(again[1], heldout)
    assert not np.array_equal(token_split(200, 0.25, seed=4)[1], heldout)
    assert token_split(4, 0.01)[1].size == 2  # at least one held-out pair


def test_probe_recovers_planted_structure_far_below_the_shuffled_baseline(rng):
    phi, W = planted(rng)
    train, heldout = token_split(40)
    probe = prefix_probe(phi, W, train, heldout, steps=1000)["heldout_mse"][0]
    baseline = shuffled_baseline(phi, W, train, heldout, steps=1000)["heldout_mse"][0]
    assert probe < 0.01 and probe < 0.1 * baseline


def test_probe_on_noise_embeddings_does_no_better_than_the_baseline(rng):
    phi, W = planted(rng)
    noise = rng.normal(size=(5,) + W.shape)  # five unrelated embedding sets as snapshots
    train, heldout = token_split(40)
    probe = prefix_probe(phi, noise, train, heldout)["heldout_mse"]
    baseline = shuffled_baseline(phi, noise, train, heldout)["heldout_mse"]
    assert probe.shape == baseline.shape == (5,)
    assert 0.5 < probe.mean() / baseline.mean() < 2.0


@pytest.mark.parametrize("method", ["reference", "fast"])
def test_probe_snapshots_are_fitted_independently_and_deterministically(rng, method):
    phi, W = planted(rng, T=12, Y=6, C=8)
    stack = np.stack([W, rng.normal(size=W.shape)])
    train, heldout = token_split(12)
    both = prefix_probe(phi, stack, train, heldout, steps=50, method=method)
    alone = prefix_probe(phi, stack[1], train, heldout, steps=50, method=method)
    # The objective is separable over snapshots. In float64 the batch changes nothing; float32 matrix
    # kernels round differently for a different number of rows, by about float32's epsilon.
    np.testing.assert_allclose(both["heldout_mse"][1], alone["heldout_mse"][0],
                               rtol=1e-10 if method == "reference" else 1e-5)
    np.testing.assert_array_equal(both["v"], prefix_probe(phi, stack, train, heldout, steps=50, method=method)["v"])


def test_probe_never_uses_heldout_tokens_to_fit(rng):
    phi, W = planted(rng, T=12, Y=6, C=8)
    train, heldout = token_split(12)
    fitted = prefix_probe(phi, W, train, heldout, steps=50)
    phi2, W2 = phi.copy(), W.copy()
    phi2[heldout[0]] = rng.random(phi.shape[1:])
    W2[heldout[1]] = rng.normal(size=W.shape[1])
    refitted = prefix_probe(phi2, W2, train, heldout, steps=50)
    np.testing.assert_array_equal(fitted["v"], refitted["v"])
    assert fitted["heldout_mse"][0] != refitted["heldout_mse"][0]  # but the held-out score sees them


def test_probe_refuses_overlapping_splits(rng):
    phi, W = planted(rng, T=8, Y=4, C=4)
    with pytest.raises(InputError, match="disjoint"):
        prefix_probe(phi, W, np.arange(5), np.arange(4, 8))


def test_shuffled_baseline_is_the_probe_on_permuted_rows(rng):
    phi, W = planted(rng, T=10, Y=5, C=6)
    train, heldout = token_split(10)
    base = shuffled_baseline(phi, W, train, heldout, steps=30, seed=2)
    assert not np.array_equal(base["permutation"], np.arange(10))
    direct = prefix_probe(phi[base["permutation"]], W, train, heldout, steps=30, seed=2)
    np.testing.assert_array_equal(base["heldout_mse"], direct["heldout_mse"])


# --- attention path ------------------------------------------------------------------------------


def brute_attention_path(X, A, V, tokens, labels):
    """Direct sums over (window, s, i <= s) of SPEC §7's definition."""
    num = np.zeros((len(tokens), len(labels)))
    den = np.zeros(len(tokens))
    row = {t: j for j, t in enumerate(tokens)}
    col = {t: j for j, t in enumerate(labels)}
    for n in range(X.shape[0]):
        for s in range(X.shape[1] - 1):
            for i in range(s + 1):
                a = X[n, i]
                if a in row:
                    den[row[a]] += 1 / (s + 1)
                    if X[n, s + 1] in col:
                        num[row[a], col[X[n, s + 1]]] += A[n, s, i] / (s + 1)
    return np.divide(num, den[:, None], out=np.zeros_like(num), where=den[:, None] > 0)


def test_attention_path_signature_matches_brute_force(rng):
    V, n, T = 7, 5, 6
    X = rng.integers(0, V, size=(n, T))
    A = np.tril(rng.random((n, T, T)))
    A /= A.sum(-1, keepdims=True)
    tokens, labels = np.array([3, 0, 5, 6]), np.array([1, 2, 0])
    got = attention_path_signature(X, A, V, tokens, labels)
    np.testing.assert_allclose(got, brute_attention_path(X, A, V, tokens, labels), atol=1e-14)
    full = attention_path_signature(X, A, V, tokens)
    np.testing.assert_allclose(full, brute_attention_path(X, A, V, tokens, np.arange(V)), atol=1e-14)


def test_attention_path_signature_ignores_future_keys_and_chunks_exactly(rng, monkeypatch):
    import ctxstair.measure.primitives as analysis

    V, n, T = 5, 9, 4
    X = rng.integers(0, V, size=(n, T))
    A = rng.random((n, T, T))  # not causal: entries above the diagonal must not count
    expected = attention_path_signature(X, np.tril(A), V, np.arange(V))
    monkeypatch.setattr(analysis, "_ATTENTION_CHUNK", 7)  # one or two windows per chunk
    np.testing.assert_allclose(attention_path_signature(X, A, V, np.arange(V)), expected, atol=1e-14)


def test_attention_path_signature_with_unit_weights_is_a_distribution_over_next_tokens(rng):
    # With Ā[s, i] = 1 the numerator summed over all labels equals the denominator: each row of a
    # token that occurs before the last position sums to 1; a token that never does is zero.
    V, n, T = 5, 6, 5
    X = rng.integers(0, V - 1, size=(n, T))
    X[:, -1] = V - 1  # token V-1 sits only at the last position
    phi = attention_path_signature(X, np.ones((n, T, T)), V, np.arange(V))
    np.testing.assert_allclose(phi[:-1].sum(axis=1), 1.0, atol=1e-14)
    assert np.all(phi[-1] == 0)


def test_attention_path_signature_refuses_a_wrong_attention_shape(rng):
    with pytest.raises(InputError, match="attention"):
        attention_path_signature(np.zeros((2, 3), dtype=int), np.zeros((2, 3, 2)), 4, np.arange(4))


def test_attention_path_correlation_is_pearson_of_the_two_geometries(rng):
    phi = rng.random((9, 6))
    Z = rng.normal(size=(9, 4))
    assert attention_path_correlation(phi, Z) == pytest.approx(compare(cosine_matrix(Z), cosine_matrix(phi))["pearson"])
    assert attention_path_correlation(phi, phi.copy()) == pytest.approx(1.0)


# --- attention paths and path shares of a decoder ----------------------------------------------------


def small_gpt_neox():
    """A float64 GPT-NeoX as lm train builds it (its code computes in float64 throughout, so sums of
    paths are exact to float64 rounding), with large enough weights (γ = 0.3) for uneven attention and
    unequal paths."""
    import torch
    from family_models import lm_train_model

    return lm_train_model(12, family="gpt_neox", positions=8, d_model=8, n_layers=2, n_heads=2, head_dim=4, d_mlp=16,
                          gamma=0.3, seed=1, dtype=torch.float64).eval()


def value_output_rows(attention, w):
    """z = W_O W_V w of a GPT-NeoX attention layer for rows w (k, d), by running its own projections
    (biases removed by subtracting their output at 0): each head's query, key and value rows are
    side by side in query_key_value's output."""
    import torch

    def linear(module, x):
        return module(x) - module(torch.zeros_like(x))

    values = linear(attention.query_key_value, w).unflatten(-1, (2, 3, 4))[..., 2, :]  # 2 heads of 4 values
    return linear(attention.dense, values.flatten(-2))


def test_attention_path_scores_equal_hugging_face_attention_and_brute_force_sums(rng):
    import torch

    model = small_gpt_neox()
    X = rng.integers(0, 12, size=(5, 8))
    tokens = np.array([0, 2, 3, 5, 7, 8, 10, 11])
    scores = attention_path_scores(model, X, tokens, 12, permutations=30)
    model.set_attn_implementation("eager")
    with torch.no_grad():  # the attention weights transformers returns, not read by the model view's hooks
        attentions = model(torch.from_numpy(X), output_attentions=True).attentions
        w = model.get_input_embeddings().weight[torch.from_numpy(tokens)]
        Zs = [value_output_rows(layer.attention, w).numpy() for layer in model.gpt_neox.layers]
    assert [layer for layer, _, _ in scores] == [0, 1]
    for (layer, corr, null), attention, Z in zip(scores, attentions, Zs):
        phi = brute_attention_path(X, attention.mean(dim=1).numpy(), 12, tokens, np.arange(12))
        assert corr == pytest.approx(compare(cosine_matrix(Z), cosine_matrix(phi))["pearson"], abs=1e-5)
        # The null: the largest |r| over the 30 permutations of the signature rows drawn from seed = layer.
        shuffles = np.random.default_rng(layer).permuted(np.tile(np.arange(tokens.size), (30, 1)), axis=1)
        rs = [compare(cosine_matrix(Z), cosine_matrix(phi[p]))["pearson"] for p in shuffles]
        assert null == pytest.approx(max(abs(r) for r in rs), abs=1e-5)
        assert abs(corr) > 0.01 and null > 0  # not a trivial (zero or NaN) agreement


def test_attention_path_scores_are_the_same_in_chunks_of_windows(rng, monkeypatch):
    import ctxstair.measure.primitives as analysis

    model = small_gpt_neox()
    X = rng.integers(0, 12, size=(7, 8))
    whole = attention_path_scores(model, X, np.arange(12), 12, permutations=5)
    monkeypatch.setattr(analysis, "_PATTERN_CHUNK", 2 * 2 * 8 * 8 * 3)  # three windows per forward pass
    np.testing.assert_allclose(attention_path_scores(model, X, np.arange(12), 12, permutations=5), whole, atol=1e-12)


def test_attention_path_counts_of_a_split_sample_add_up_to_the_whole_samples(rng):
    # What lets the ranks of a sharded job count their share of the windows: the counts are sums
    # over windows, and the signature divides them only at the end.
    import torch

    from ctxstair.models.view import view_of

    model = small_gpt_neox()
    X = rng.integers(0, 12, size=(7, 8))
    tokens = np.array([1, 4, 5, 9, 11])
    whole = attention_path_counts(model, X, tokens, 12)
    assert whole.shape == (2, 5, 13) and (whole[..., -1] > 0).all()
    parts = sum(attention_path_counts(model, part, tokens, 12) for part in np.array_split(X, 3))
    np.testing.assert_allclose(parts, whole, rtol=1e-13, atol=0)
    with torch.no_grad():
        pattern = view_of(model).attention_pattern(torch.from_numpy(X)).mean(dim=2).numpy()
    for layer in range(2):
        np.testing.assert_array_equal(path_signature_of(whole[layer]),
                                      attention_path_signature(X, pattern[layer], 12, tokens))
    given = attention_path_scores(model, X, tokens, 12, permutations=5, counts=parts)
    np.testing.assert_allclose(given, attention_path_scores(model, X, tokens, 12, permutations=5), atol=1e-12)
    with pytest.raises(InputError, match="counts must have shape"):
        attention_path_scores(model, X, tokens, 12, counts=whole[:, :, :-1])


def test_path_shares_are_path_norms_of_an_exact_split_of_the_loss_gradient(rng):
    import torch

    from ctxstair.models import next_token_loss
    from ctxstair.theory.decoder_paths import decoder_embedding_paths

    model = small_gpt_neox()
    X = rng.integers(0, 12, size=(4, 8))
    tokens = np.array([1, 4, 6, 9, 11])
    shares = path_shares(model, X, tokens)
    assert list(shares) == ["embed", "attn.0", "mlp.0", "attn.1", "mlp.1"]
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-12)
    # Independently: the plain autograd gradient of the loss is minus the sum of the paths.
    X_t = torch.from_numpy(X)
    (gradient,) = torch.autograd.grad(next_token_loss(model(input_ids=X_t).logits, X_t),
                                      model.get_input_embeddings().weight)
    paths = decoder_embedding_paths(model, X, full=False)
    np.testing.assert_allclose(sum(paths.values()), -gradient.numpy(), atol=1e-12)
    norms = {name: np.linalg.norm(g[tokens]) for name, g in paths.items()}
    for name, share in shares.items():
        assert share == pytest.approx(norms[name] / sum(norms.values()), abs=1e-12)
    assert max(shares.values()) - min(shares.values()) > 0.05  # unequal paths: the check above can fail
    # rows= returns those rows of each path, bit for bit.
    restricted = decoder_embedding_paths(model, X, full=False, rows=tokens[::-1])
    for name, g in paths.items():
        np.testing.assert_array_equal(restricted[name], g[tokens[::-1]])

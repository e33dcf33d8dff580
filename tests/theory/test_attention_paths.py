"""Attention-only model (SPEC §6.3): the value, key and query paths of the label-driven embedding
gradient from the signatures against autograd, their sum against a literal per-sample model, and
closed forms."""

import numpy as np
import pytest
import torch

from ctxstair.errors import InputError, TooLargeError
from ctxstair.signatures import attention_label_signature, label_signature, occurrence, position_label_signature
from ctxstair.theory import attention_forward, attention_label_paths, attention_path_gradients

SHAPES = [(1, 4, 3, 2, 2), (2, 5, 4, 3, 2), (3, 4, 5, 2, 3), (4, 6, 3, 4, 5), (4, 3, 6, 3, 2)]  # (L, V, d, d_k, d_v)


def problem(L, V, d, d_k, d_v, seed, n=20):
    """Random weights of scale 0.3–1 (attention far from uniform) and data with repeated tokens."""
    rng = np.random.default_rng(seed)
    shapes = {"W_E": (V, d), "W_Q": (d_k, d), "W_K": (d_k, d), "W_V": (d_v, d), "W_O": (d, d_v), "W_U": (V, d)}
    params = {k: rng.normal(0, rng.uniform(0.3, 1.0), shape) for k, shape in shapes.items()}
    params["W_Q"] *= 3  # sharpen the attention
    return params, rng.integers(0, V, (n, L)), rng.integers(0, V, n)


def literal_gradient(params, X, y, objective="label", scale=None):
    """∇_{W_E} of mean f[y] (or −mean cross-entropy) for the model written out sample by sample."""
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()}
    W_E = t["W_E"].clone().requires_grad_()
    c = 1 / np.sqrt(W_E.shape[1]) if scale is None else scale
    total = 0
    for x, label in zip(X, y):
        e = W_E[torch.as_tensor(x)] + t.get("W_pos", 0)  # (L, d)
        a = torch.softmax(c * (e @ t["W_K"].T) @ (t["W_Q"] @ e[-1]), dim=0)
        f = t["W_U"] @ (t["W_O"] @ (t["W_V"] @ (a @ e)))
        total = total + (f[label] if objective == "label" else torch.log_softmax(f, dim=0)[label])
    (grad,) = torch.autograd.grad(total / len(X), W_E)
    return grad.numpy()


def distance(a, b, reference):
    return float(np.linalg.norm(a - b) / np.linalg.norm(reference))


@pytest.mark.parametrize("scale", [None, 0.37])
@pytest.mark.parametrize("shape", SHAPES)
def test_signature_paths_equal_autograd_paths(shape, scale):
    params, X, y = problem(*shape, seed=sum(shape))
    if shape[0] > 1:  # the test is only meaningful with attention far from uniform
        A, _ = attention_forward(params, X, scale)
        assert np.ptp(A, axis=1).max() > 0.5
    paths = attention_label_paths(params, X, y, scale=scale)
    reference = attention_path_gradients(params, X, y, scale=scale)
    for name in ("value", "key", "query"):
        assert paths[name].shape == params["W_E"].shape
        assert distance(paths[name], reference[name], reference["full"]) < 1e-10, name
        if shape[0] > 1:
            assert np.linalg.norm(reference[name]) > 1e-3 * np.linalg.norm(reference["full"]), name


@pytest.mark.parametrize("shape", SHAPES)
def test_paths_sum_to_the_full_and_the_literal_gradient(shape):
    params, X, y = problem(*shape, seed=7 + sum(shape))
    grads = attention_path_gradients(params, X, y)
    literal = literal_gradient(params, X, y)
    assert distance(grads["value"] + grads["key"] + grads["query"], grads["full"], literal) < 1e-12
    assert distance(grads["full"], literal, literal) < 1e-12
    paths = attention_label_paths(params, X, y)
    assert distance(paths["value"] + paths["key"] + paths["query"], literal, literal) < 1e-10


@pytest.mark.parametrize("shape", SHAPES[1:])
def test_positional_embeddings_and_loss_objective(shape):
    """With W_pos and −mean cross-entropy, the three autograd paths still sum to the full gradient."""
    params, X, y = problem(*shape, seed=11 + sum(shape))
    params["W_pos"] = np.random.default_rng(0).normal(0, 0.7, (shape[0], shape[2]))
    for objective in ("label", "loss"):
        grads = attention_path_gradients(params, X, y, objective, scale=0.8)
        literal = literal_gradient(params, X, y, objective, scale=0.8)
        assert distance(grads["full"], literal, literal) < 1e-12
        assert distance(grads["value"] + grads["key"] + grads["query"], literal, literal) < 1e-12


def test_query_moment_is_the_key_moment_with_alpha_and_beta_swapped():
    """Q1_α(ν,β) = mean_n 1{x_L = α} Σ_s a_s 1{y = ν, x_s = β}, three ways: by a loop; as K1_β(ν,α) from
    the x_L-conditioned signatures; from the signatures given α at the last position (Bayes' rule:
    L r_β φ^{y;x_L}_β(ν,α) = P(x_L = α) Σ_s P(y = ν, x_s = β | x_L = α))."""
    L, V = 3, 4
    params, X, y = problem(L, V, 5, 3, 2, seed=5, n=40)
    A, _ = attention_forward(params, X)
    n, last = len(X), L - 1
    loop = np.zeros((V, V, V))
    for k in range(n):
        for s in range(L):
            loop[X[k, last], y[k], X[k, s]] += A[k, s] / n
    psi = attention_label_signature(X, y, A, V, (last,))  # (β, ν, α): β at I, α at the last position
    K1 = L * occurrence(X, V)[:, None, None] * position_label_signature(X, y, V, (last,)) * psi
    np.testing.assert_allclose(K1.transpose(2, 1, 0), loop, atol=1e-14)
    at_last = np.bincount(X[:, last], minlength=V) / n
    given = sum(position_label_signature(X, y, V, (s,), given_position=last) for s in range(L))  # (α, ν, β)
    np.testing.assert_allclose(at_last[:, None, None] * given * psi.transpose(2, 1, 0), loop, atol=1e-14)


def test_uniform_attention_closed_form():
    """W_Q = 0: a_s = 1/L, so the key and query paths vanish and value_α = r_α M^T φ^{y;0}_α."""
    L, V = 3, 5
    params, X, y = problem(L, V, 4, 3, 2, seed=3)
    params["W_Q"] = np.zeros_like(params["W_Q"])
    paths, grads = attention_label_paths(params, X, y), attention_path_gradients(params, X, y)
    M = params["W_U"] @ params["W_O"] @ params["W_V"]
    expected = occurrence(X, V)[:, None] * (label_signature(X, y, 0, V) @ M)
    for result in (paths, grads):
        assert distance(result["value"], expected, expected) < 1e-12
        assert np.abs(result["key"]).max() == 0 and np.abs(result["query"]).max() == 0


def test_single_position_has_no_key_or_query_path():
    """L = 1: a ≡ 1, so ∂f/∂z = a u_y·(e − g) = 0 and only the value path remains."""
    params, X, y = problem(1, 4, 3, 2, 2, seed=1)
    paths, grads = attention_label_paths(params, X, y), attention_path_gradients(params, X, y)
    size = np.linalg.norm(grads["full"])
    for result in (paths, grads):
        assert np.linalg.norm(result["key"]) < 1e-14 * size and np.linalg.norm(result["query"]) < 1e-14 * size


def test_forward_attention_is_a_distribution_and_logits_read_out_the_weighted_embeddings():
    params, X, y = problem(4, 6, 3, 4, 5, seed=2)
    A, f = attention_forward(params, X)
    np.testing.assert_allclose(A.sum(axis=1), 1.0, atol=1e-14)
    g = np.einsum("nl,nld->nd", A, params["W_E"][X])  # attention-weighted embeddings: f = W_U W_O W_V g
    np.testing.assert_allclose(f, g @ (params["W_U"] @ params["W_O"] @ params["W_V"]).T, atol=1e-13)


def test_bad_input_is_refused():
    params, X, y = problem(3, 4, 3, 2, 2, seed=0)
    with pytest.raises(InputError, match="W_pos"):
        attention_label_paths({**params, "W_pos": np.zeros((3, 3))}, X, y)
    with pytest.raises(InputError, match="missing"):
        attention_path_gradients({k: v for k, v in params.items() if k != "W_O"}, X, y)
    with pytest.raises(InputError, match="unknown"):
        attention_forward({**params, "W_QK": np.eye(3)}, X)
    with pytest.raises(InputError, match="W_K must have shape"):
        attention_forward({**params, "W_K": np.zeros((3, 3))}, X)
    with pytest.raises(InputError, match="W_pos must have shape"):
        attention_path_gradients({**params, "W_pos": np.zeros((2, 3))}, X, y)
    with pytest.raises(InputError, match="objective"):
        attention_path_gradients(params, X, y, objective="prediction")
    with pytest.raises(InputError, match="scale"):
        attention_forward(params, X, scale=float("inf"))
    with pytest.raises(InputError, match="X"):
        attention_forward(params, X + 4)
    with pytest.raises(TooLargeError, match="K2"):
        attention_label_paths(params, X, y, max_bytes=1000)

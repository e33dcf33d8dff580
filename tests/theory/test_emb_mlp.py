"""The Emb-MLP early-time law (SPEC §6.2): the predicted direction matches the measured update
at small initialization, and not at large initialization (so the check can fail)."""

import numpy as np
import torch

from ctxstair import tasks
from ctxstair.models.emb_mlp import EmbMLP
from ctxstair.theory.emb_mlp import emb_mlp_early_direction, emb_mlp_early_law


def test_predicted_direction_is_the_small_init_limit_of_the_gradient():
    ds = tasks.make("add", N=6)
    model = EmbMLP(ds.vocab_size, d=8, m=8, gamma=3.0, seed=1)
    # Shrink W_E further: the law's premises are σ'(h W_1) ≈ 1 and p ≈ 1/V.
    with torch.no_grad():
        model.W_E.mul_(1e-4)
    X, y = torch.from_numpy(ds.X), torch.from_numpy(ds.y)
    torch.nn.functional.cross_entropy(model(X), y).backward()
    velocity = -model.W_E.grad.numpy()
    predicted = emb_mlp_early_direction(ds.X, ds.y, ds.vocab_size, model.W_1.detach().numpy(),
                                        model.W_2.detach().numpy())
    np.testing.assert_allclose(velocity, predicted, rtol=1e-3, atol=1e-12 * np.abs(predicted).max())


def test_early_update_follows_the_centred_order0_signature_at_small_init():
    ds = tasks.make("add", N=12)
    small = emb_mlp_early_law(ds, gamma=1.5, steps=5, lr=0.5)
    assert small["min_cosine"] > 0.99
    large = emb_mlp_early_law(ds, gamma=0.25, steps=5, lr=0.5)
    assert large["mean_cosine"] < 0.9

"""The predecessor paper's early-time law for the Emb-MLP model (SPEC §6.2, last bullet).

At small initialization the hidden pre-activations are ≈ 0, so σ'(·) ≈ σ'(0) = 1 (tanh) and the
prediction is ≈ uniform. The embedding gradient flow then reduces to

    dw^E_α/dt ≈ L r_α (φ^{y;0}_α − (1/V) 1) W_2ᵀ W_1ᵀ

(row convention; SPEC writes r_s, which differs by the constant factor L): every embedding moves
along its centred order-0 label signature mapped back through the still-small downstream weights.
"""

from __future__ import annotations

import numpy as np
import torch

from ctxstair.models.emb_mlp import EmbMLP
from ctxstair.signatures import label_signature, occurrence
from ctxstair.tasks import Dataset


def emb_mlp_early_direction(X: np.ndarray, y: np.ndarray, vocab_size: int, W_1: np.ndarray,
                            W_2: np.ndarray) -> np.ndarray:
    """Predicted early velocity of every embedding, (V, d): ``L r_α (φ^{y;0}_α − 1/V) W_2ᵀ W_1ᵀ``.

    Args:
        X: int (n, L) inputs; y: int (n,) labels; vocab_size: V.
        W_1: (d, m); W_2: (m, V) — the downstream weights at initialization.
    """
    L = X.shape[1]
    phi0 = label_signature(X, y, 0, vocab_size)  # (V, V)
    r = occurrence(X, vocab_size)  # (V,)
    centred = phi0 - np.where(r[:, None] > 0, 1.0 / vocab_size, 0.0)
    return (L * r)[:, None] * (centred @ W_2.T @ W_1.T)


def emb_mlp_early_law(dataset: Dataset, d: int = 64, m: int = 64, gamma: float = 1.5, activation: str = "tanh",
                      steps: int = 5, lr: float = 0.1, seed: int = 0) -> dict:
    """Train an Emb-MLP for a few small full-batch GD steps and compare the measured embedding
    update ``W_E(steps) − W_E(0)`` with the predicted early direction, token by token.

    Returns:
        dict with ``cosine`` (T,) per task token (``dataset.tokens``; NaN for a token that does not
        occur), ``mean_cosine`` and ``min_cosine`` over tokens that occur.
    """
    model = EmbMLP(dataset.vocab_size, d, m, gamma, seed, activation)
    X, y = torch.from_numpy(dataset.X), torch.from_numpy(dataset.y)
    predicted = emb_mlp_early_direction(dataset.X, dataset.y, dataset.vocab_size,
                                        model.W_1.detach().numpy(), model.W_2.detach().numpy())
    start = model.W_E.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(X), y).backward()
        optimizer.step()
    measured = (model.W_E.detach() - start).numpy()
    tokens = dataset.tokens
    num = (measured[tokens] * predicted[tokens]).sum(axis=1)
    den = np.linalg.norm(measured[tokens], axis=1) * np.linalg.norm(predicted[tokens], axis=1)
    cosine = np.divide(num, den, out=np.full(tokens.size, np.nan), where=den > 0)
    return {"cosine": cosine, "mean_cosine": float(np.nanmean(cosine)), "min_cosine": float(np.nanmin(cosine))}

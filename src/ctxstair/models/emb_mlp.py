"""The Emb-MLP model of the predecessor paper (SPEC §5): ``G(X) = σ(Σ_s w^E_{x_s} W_1) W_2``.

Row convention of the project: ``W_E`` (V, d), ``W_1`` (d, m), ``W_2`` (m, V); logits are
``σ(h W_1) W_2`` with ``h = Σ_s W_E[x_s]``. Every matrix is γ-initialised (SPEC §4) with its input
width as d_in (d for W_E by the embedding convention, d for W_1, m for W_2).
"""

from __future__ import annotations

import torch

from ctxstair.models.activations import activation_fn
from ctxstair.models.init import gamma_normal_


class EmbMLP(torch.nn.Module):
    """One Emb-MLP model with parameters ``W_E`` (V, d), ``W_1`` (d, m), ``W_2`` (m, V)."""

    def __init__(self, vocab_size: int, d: int, m: int, gamma: float, seed: int, activation: str = "tanh",
                 dtype: torch.dtype = torch.float64):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.sigma = activation_fn(activation)
        self.W_E = torch.nn.Parameter(gamma_normal_(torch.empty(vocab_size, d, dtype=dtype), d, gamma, gen))
        self.W_1 = torch.nn.Parameter(gamma_normal_(torch.empty(d, m, dtype=dtype), d, gamma, gen))
        self.W_2 = torch.nn.Parameter(gamma_normal_(torch.empty(m, vocab_size, dtype=dtype), m, gamma, gen))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Logits (n, V) for token ids X (n, L)."""
        counts = torch.zeros(X.shape[0], self.W_E.shape[0], dtype=self.W_E.dtype)
        counts.scatter_add_(1, X, torch.ones_like(X, dtype=self.W_E.dtype))
        return self.sigma((counts @ self.W_E) @ self.W_1) @ self.W_2

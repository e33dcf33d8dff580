"""The CBOW-type feed-forward model as a batched ensemble (SPEC §5).

    f(X) = W_U σ(Σ_{i=1}^L w^E_{x_i})      no biases, no normalisation, no positions

K members are stored stacked, ``W_E`` and ``W_U`` of shape (K, V, d_max), and run as one batched
computation. Members may differ in seed, γ and width d: a member of width d < d_max is zero-padded.
Padding stays exactly zero under training because σ(0) = 0 for every activation here, so a padded
coordinate produces no logit and receives no gradient (and Adam/AdamW leave zero-gradient zeros
at zero). Each member's initial weights depend only on its own seed, γ and d, not on the other
members, so member results do not depend on the ensemble they were trained in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ctxstair.models.activations import activation_fn
from ctxstair.models.init import gamma_normal_, realised_std


@dataclass(frozen=True)
class MemberSpec:
    """One ensemble member: its seed, width and γ for W_E and W_U (SPEC §4)."""

    seed: int
    d: int
    gamma_embedding: float
    gamma_unembedding: float


class CBOWEnsemble(torch.nn.Module):
    """K CBOW models trained together. ``W_E``, ``W_U``: (K, V, d_max) parameters (rows = tokens)."""

    def __init__(self, vocab_size: int, members: Sequence[MemberSpec], activation: str = "relu",
                 coeffs: Sequence[float] = (), power: int = 2, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.members = tuple(members)
        self.sigma = activation_fn(activation, coeffs, power)
        d_max = max(m.d for m in self.members)
        W_E = torch.zeros(len(self.members), vocab_size, d_max, dtype=dtype)
        W_U = torch.zeros_like(W_E)
        for k, m in enumerate(self.members):
            gen = torch.Generator().manual_seed(m.seed)
            # SPEC §4: embeddings use the width d as d_in; W_U maps R^d to logits, so d_in = d too.
            # Draw into a contiguous (V, d) tensor, then copy: normal_ on the strided slice of a
            # wider array draws in a different order, which would make a member depend on d_max.
            W_E[k, :, : m.d] = gamma_normal_(torch.empty(vocab_size, m.d, dtype=dtype), m.d, m.gamma_embedding, gen)
            W_U[k, :, : m.d] = gamma_normal_(torch.empty(vocab_size, m.d, dtype=dtype), m.d, m.gamma_unembedding, gen)
        self.W_E = torch.nn.Parameter(W_E)
        self.W_U = torch.nn.Parameter(W_U)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        """Logits (K, n, V) for token ids X (n, L)."""
        # Σ_i w^E_{x_i} = N(X) @ W_E with the count matrix N_α(X): a dense matmul, faster to
        # differentiate than a gather and deterministic on CPU.
        counts = torch.zeros(X.shape[0], self.W_E.shape[1], dtype=self.W_E.dtype)
        counts.scatter_add_(1, X, torch.ones_like(X, dtype=self.W_E.dtype))
        h = counts @ self.W_E  # (K, n, d)
        return self.sigma(h) @ self.W_U.transpose(1, 2)

    def member_rows(self) -> list[dict[str, float]]:
        """One row per member for ``members.csv``: seed, d, γ's and the realised standard deviation
        of its W_E and W_U over its own d columns (SPEC §4)."""
        return [
            {"seed": m.seed, "d": m.d, "gamma_embedding": m.gamma_embedding, "gamma_unembedding": m.gamma_unembedding,
             "init_std_W_E": realised_std(self.W_E[k, :, : m.d]), "init_std_W_U": realised_std(self.W_U[k, :, : m.d])}
            for k, m in enumerate(self.members)
        ]

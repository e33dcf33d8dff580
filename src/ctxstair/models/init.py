"""γ-initialization (SPEC §4): every weight ~ N(0, d_in^{-2γ}), i.e. standard deviation d_in^{-γ}.

For embeddings the input is a one-hot, so the group's convention (followed here) uses the
embedding width d as d_in. γ = 0.5 is the usual scale; γ > 0.5 is "small initialization".
"""

from __future__ import annotations

import torch


def gamma_normal_(tensor: torch.Tensor, d_in: int, gamma: float, generator: torch.Generator) -> torch.Tensor:
    """Fill ``tensor`` in place with N(0, (d_in^-γ)²) draws from ``generator``; return it."""
    with torch.no_grad():
        return tensor.normal_(0.0, float(d_in) ** -gamma, generator=generator)


def realised_std(tensor: torch.Tensor) -> float:
    """Empirical standard deviation of all entries (what was actually applied, SPEC §4)."""
    return float(tensor.detach().double().std())

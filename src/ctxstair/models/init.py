"""γ-initialization (SPEC §4): every weight ~ N(0, d_in^{-2γ}), i.e. standard deviation d_in^{-γ}.

For embeddings the input is a one-hot, so the group's convention (followed here) uses the
embedding width d as d_in. γ = 0.5 is the usual scale; γ > 0.5 is "small initialization".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ctxstair.config import RunConfig



@dataclass(frozen=True)
class MemberSpec:
    """One ensemble member: its seed, width and γ for W_E and W_U (SPEC §4)."""

    seed: int
    d: int
    gamma_embedding: float
    gamma_unembedding: float


def resolve_gamma(gamma: float, override: float | None) -> float:
    """γ of one component (SPEC §4): its own ``override`` when given, else the model's ``gamma``.
    Every model kind resolves its per-component γ here."""
    return float(gamma if override is None else override)


def member_specs(cfg: RunConfig) -> list[MemberSpec]:
    """Ensemble members of a config: ``train.members`` seeds from ``train.seed`` (SPEC §4 γ per tensor)."""
    init = cfg.model.init
    return [MemberSpec(seed=cfg.train.seed + k, d=cfg.model.d,
                       gamma_embedding=resolve_gamma(init.gamma, init.embedding),
                       gamma_unembedding=resolve_gamma(init.gamma, init.unembedding))
            for k in range(cfg.train.members)]


def gamma_normal_(tensor: torch.Tensor, d_in: int, gamma: float, generator: torch.Generator) -> torch.Tensor:
    """Fill ``tensor`` in place with N(0, (d_in^-γ)²) draws from ``generator``; return it."""
    with torch.no_grad():
        return tensor.normal_(0.0, float(d_in) ** -gamma, generator=generator)


def realised_std(tensor: torch.Tensor) -> float:
    """Empirical standard deviation of all entries (what was actually applied, SPEC §4)."""
    return float(tensor.detach().double().std())

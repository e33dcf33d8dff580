"""Models trained from γ-controlled initialization (SPEC §4-5), with an ensemble axis first.

Model kinds of the ensemble engine (``model.kind`` of a run's config) follow one small protocol:
the module ``ctxstair.models.<kind>`` has ``from_config(cfg, dataset) -> Ensemble``, and the model
it builds is an :class:`Ensemble`. A new kind is that one module plus its name (and any settings)
in :mod:`ctxstair.config`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

import torch

from ctxstair.models.activations import activation_fn
from ctxstair.models.attention import AttentionEnsemble
from ctxstair.models.cbow import CBOWEnsemble
from ctxstair.models.init import MemberSpec, gamma_normal_, member_specs, realised_std, resolve_gamma
from ctxstair.models.loss import next_token_loss

if TYPE_CHECKING:
    from ctxstair.config import RunConfig
    from ctxstair.tasks import Dataset


class Ensemble(Protocol):
    """What the ensemble engine needs of a model kind: K stacked members as one ``torch.nn.Module``
    whose parameters carry the member axis first (``W_E`` (K, V, d) among them)."""

    def forward(self, X: torch.Tensor, members: slice = slice(None)) -> torch.Tensor:
        """Logits (k, n, V) of ``members`` (default all K; the engine runs groups of them) for token
        ids X (n, L)."""

    def member_rows(self) -> list[dict]:
        """One row per member for ``members.csv``: seed, width, γ's and realised initial stds."""


def build_ensemble(cfg: RunConfig, dataset: Dataset) -> Ensemble:
    """The ensemble of ``cfg.model.kind`` for ``dataset``, from ``ctxstair.models.<kind>.from_config``."""
    return importlib.import_module(f"ctxstair.models.{cfg.model.kind}").from_config(cfg, dataset)


__all__ = ["AttentionEnsemble", "CBOWEnsemble", "Ensemble", "MemberSpec",
           "activation_fn", "build_ensemble", "gamma_normal_", "member_specs", "next_token_loss", "realised_std",
           "resolve_gamma"]

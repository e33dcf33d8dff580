"""Autograd references for the gradient-flow decomposition (SPEC §1, §6): the gradient of the
CBOW model's own forward pass (:class:`ctxstair.models.CBOWEnsemble`, float64) with respect to
``W_E`` for each expression the theory splits the flow into. They check the signature expansions
of :mod:`ctxstair.theory.cbow_terms` and measure how far a fitted polynomial is from the real
activation (:mod:`ctxstair.theory.activation_fit`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ctxstair.errors import InputError
from ctxstair.models import CBOWEnsemble, MemberSpec

__all__ = ["OBJECTIVES", "embedding_gradient"]


def _label(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return f.gather(1, y[:, None]).mean()


def _uniform(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return f.mean(dim=1).mean()


def _correction(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    centred = f - f.mean(dim=1, keepdim=True)  # H f
    return (centred * f).sum(dim=1).mean() / (2 * f.shape[1])


def _prediction(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (f * torch.softmax(f, dim=1).detach()).sum(dim=1).mean()


def _loss(f: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(f, y)


#: Expressions whose W_E-gradient :func:`embedding_gradient` returns (f = logits (n, V)):
#: label ``mean f[y]``; uniform ``mean Σ_ν f_ν / V``; correction ``mean f^T H f / (2V)``;
#: prediction ``mean f · stopgrad(softmax f)`` (the exact prediction-induced part); loss: mean
#: cross-entropy. Flow: ``−∇ loss = label − prediction``.
OBJECTIVES = {"label": _label, "uniform": _uniform, "correction": _correction, "prediction": _prediction,
              "loss": _loss}


def embedding_gradient(W_E: np.ndarray, W_U: np.ndarray, X: np.ndarray, y: np.ndarray | None, objective: str,
                       activation: str = "poly", coeffs: Sequence[float] = (), power: int = 2) -> np.ndarray:
    """Autograd gradient ``∇_{W_E}`` of one flow component of the CBOW model, float64 (SPEC §1, §6).

    Args:
        W_E, W_U: float (V, d), or stacks (K, V, d) of K models, differentiated in one batched pass.
        X: int (n, L); y: int (n,) labels (may be None for ``uniform``, ``correction`` and ``prediction``).
        objective: a key of :data:`OBJECTIVES`.
        activation, coeffs, power: the model's activation as in :func:`ctxstair.models.activation_fn`.

    Returns:
        float64 (V, d) (or (K, V, d)): row α is the gradient with respect to ``W_E[α]``.
    """
    if objective not in OBJECTIVES:
        raise InputError(f"unknown objective {objective!r}; allowed: {', '.join(OBJECTIVES)}")
    if y is None and objective in ("label", "loss"):
        raise InputError(f"objective {objective!r} needs the labels y")
    W_E, W_U = np.asarray(W_E, dtype=np.float64), np.asarray(W_U, dtype=np.float64)
    if W_E.shape != W_U.shape or W_E.ndim not in (2, 3):
        raise InputError(f"W_E and W_U must both have shape (V, d) or (K, V, d), got {W_E.shape} and {W_U.shape}")
    stack_E, stack_U = (W_E, W_U) if W_E.ndim == 3 else (W_E[None], W_U[None])
    K, V, d = stack_E.shape
    model = CBOWEnsemble(V, [MemberSpec(0, d, 1.0, 1.0)] * K, activation, coeffs, power, dtype=torch.float64)
    with torch.no_grad():
        model.W_E.copy_(torch.from_numpy(stack_E))
        model.W_U.copy_(torch.from_numpy(stack_U))
    labels = torch.zeros(len(X), dtype=torch.long) if y is None else torch.as_tensor(np.asarray(y), dtype=torch.long)
    logits = model(torch.as_tensor(np.asarray(X), dtype=torch.long))  # (K, n, V)
    sum(OBJECTIVES[objective](f, labels) for f in logits).backward()  # members do not interact
    return model.W_E.grad.numpy() if W_E.ndim == 3 else model.W_E.grad[0].numpy()

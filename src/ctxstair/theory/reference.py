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

__all__ = ["OBJECTIVES", "embedding_gradient", "embedding_gradients"]


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
    return embedding_gradients(W_E, W_U, X, y, [objective], activation, coeffs, power)[0]


def embedding_gradients(W_E: np.ndarray, W_U: np.ndarray, X: np.ndarray, y: np.ndarray | None,
                        objectives: Sequence[str], activation: str = "poly", coeffs: Sequence[float] = (),
                        power: int = 2) -> list[np.ndarray]:
    """:func:`embedding_gradient` of several ``objectives`` of the same models (SPEC §1, §6), one array
    (V, d) or (K, V, d) each, in order: the forward pass is taken once and differentiated once per
    objective, which gives the same bits as one :func:`embedding_gradient` call per objective."""
    unknown = [objective for objective in objectives if objective not in OBJECTIVES]
    if unknown:
        raise InputError(f"unknown objective {unknown[0]!r}; allowed: {', '.join(OBJECTIVES)}")
    with_labels = [objective for objective in objectives if objective in ("label", "loss")]
    if y is None and with_labels:
        raise InputError(f"objective {with_labels[0]!r} needs the labels y")
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
    gradients = []
    for i, objective in enumerate(objectives):
        total = sum(OBJECTIVES[objective](f, labels) for f in logits)  # members do not interact
        (gradient,) = torch.autograd.grad(total, model.W_E, retain_graph=i < len(objectives) - 1)
        gradients.append(gradient.numpy() if W_E.ndim == 3 else gradient[0].numpy())
    return gradients

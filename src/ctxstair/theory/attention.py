"""Attention-only model: the label-driven embedding gradient split into value, key and query paths (SPEC §6.3).

Model (SPEC §5, §6.3). Positions are 0-based, ``s = L-1`` is the last one (SPEC's ``x_L``), which
predicts and sees every position (so no mask is needed):

    e_s = W_E[x_s]                              (+ W_pos[s] in the autograd reference only)
    z_s = c (W_K e_s)·(W_Q e_{L-1}) = c e_s^T W_QK e_{L-1},   W_QK = W_K^T W_Q (d, d),  c = 1/√d by default
    a = softmax(z),   g = Σ_s a_s e_s,   f(X) = M g,   M = W_U W_O W_V (V, d),  u_ν = M[ν].

The embeddings enter three times: as **values** (``e_s`` in ``g``), as **keys** (``e_s`` in ``z_s``)
and as the **query** (``e_{L-1}`` in every ``z_s``). The label-driven gradient
``∇_{W_E} mean_n f(X_n)[y_n]`` is the sum of the gradients through the three uses. With the softmax
Jacobian ``∂a_t/∂z_s = a_t(δ_ts − a_s)``, ``∂f_y/∂z_s = a_s u_y·(e_s − g)``, and (``w_α = W_E[α]``)

    value(α) = mean_n Σ_s 1{x_s = α} a_s u_y                                  = L r_α M^T (φ^{y;0}_α ⊙ ψ^y_α)
    key(α)   = c W_QK   [Σ_{ν,β} K1_α(ν,β) (u_ν·w_α) w_β − Σ_{ν,β,γ} K2_α(ν,β,γ) (u_ν·w_γ) w_β]
    query(α) = c W_QK^T [Σ_{ν,β} Q1_α(ν,β) (u_ν·w_β) w_β − Σ_{ν,β,γ} Q2_α(ν,β,γ) (u_ν·w_γ) w_β]

with the attention-weighted moments (means over the data, ``t`` over all L positions, ``t = L-1``
included, where ``x_t = x_L``)

    K1_α(ν,β)   = mean_n Σ_s 1{x_s = α} a_s 1{y = ν, x_L = β}    = L r_α φ^{y;x_L}_α(ν,β) ψ^{y;x_L}_α(ν,β)
    K2_α(ν,β,γ) = mean_n Σ_{s,t} 1{x_s = α} a_s a_t 1{y = ν, x_L = β, x_t = γ}
                = Σ_t L r_α φ^{y;x_L,x_t}_α(ν,β,γ) ψ^{y;x_L,x_t}_α(ν,β,γ)        (ψ of the product a_I a_t)
    Q1_α(ν,β)   = mean_n 1{x_L = α} Σ_s a_s 1{y = ν, x_s = β}          = K1_β(ν,α)
    Q2_α(ν,β,γ) = mean_n 1{x_L = α} Σ_{s,t} a_s a_t 1{y = ν, x_s = β, x_t = γ} = K2_β(ν,α,γ).

``φ`` are the (position-specific) label signatures and ``ψ`` the attention label signatures of
:mod:`ctxstair.signatures`; ``L r_α φ ψ`` turns a conditional mean back into a per-sample mean. The
query moments are the key moments with ``α`` and ``β`` swapped: "``α`` at some position attended
with ``x_L = β``" read from the other end. So every path is an attention-weighted combination of
signatures of order at most 2, with the softmax kept exact.

:func:`attention_label_paths` computes the three paths from the signatures;
:func:`attention_path_gradients` is the autograd reference (three copies of ``W_E``, one per use).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ctxstair.checks import check_dense_size, check_labels, check_sequences
from ctxstair.errors import InputError
from ctxstair.models.attention import attend
from ctxstair.signatures import attention_label_signature, label_signature, occurrence, position_label_signature
from ctxstair.theory.reference import OBJECTIVES

__all__ = ["PATH_OBJECTIVES", "attention_forward", "attention_label_paths", "attention_path_gradients"]

_REQUIRED = ("W_E", "W_Q", "W_K", "W_V", "W_O", "W_U")

#: Objectives of :func:`attention_path_gradients` (f = logits (n, V)): label ``mean f[y]``; loss
#: ``−mean cross-entropy``, so that its gradient is the gradient-flow direction ``−∇ loss``.
PATH_OBJECTIVES = {"label": OBJECTIVES["label"], "loss": lambda f, y: -OBJECTIVES["loss"](f, y)}


def attention_forward(params: dict, X: np.ndarray, scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Attention of the last position and logits of the attention-only model (module docstring, SPEC §5).

    Args:
        params: float arrays ``W_E (V, d)``, ``W_Q (d_k, d)``, ``W_K (d_k, d)``, ``W_V (d_v, d)``,
            ``W_O (d, d_v)``, ``W_U (V, d)`` and optionally ``W_pos (L, d)`` (added to every use).
        X: int (n, L) token ids.
        scale: logit scale ``c`` (default ``1/√d``).

    Returns:
        float64 attention ``a`` (n, L) and logits ``f(X)`` (n, V).
    """
    p, X, c = _prepare(params, X, scale)
    t = _to_torch(p)
    with torch.no_grad():
        a, f = _forward(t, t["W_E"], t["W_E"], t["W_E"], torch.from_numpy(X), c)
    return a.numpy(), f.numpy()


def attention_label_paths(params: dict, X: np.ndarray, y: np.ndarray, scale: float | None = None,
                          max_bytes: int | None = None) -> dict[str, np.ndarray]:
    """Value, key and query paths of the label-driven embedding gradient from the signatures (SPEC §6.3).

    The model's attention ``a`` on the data is computed from ``params``; then the order-0 and
    position-specific label signatures ``φ`` and the attention label signatures ``ψ`` (restricted to
    the labels in ``y`` and the ids in ``X``, which is exact) give the moments ``K1``, ``K2`` of the
    module docstring, and the query moments are the key moments with ``α`` and ``β`` swapped
    (``Q1_α(ν,β) = K1_β(ν,α)``, ``Q2_α(ν,β,γ) = K2_β(ν,α,γ)``).

    Args:
        params: as :func:`attention_forward`, without ``W_pos`` (the analysis model of SPEC §6.3 has no
            positional embeddings; :func:`attention_path_gradients` accepts them).
        X: int (n, L) token ids; y: int (n,) labels.
        scale: logit scale ``c`` (default ``1/√d``).
        max_bytes: budget for one dense moment (default 2 GiB). ``K2`` has ``T·Y·T·T`` float64
            entries (T ids in X, Y labels in y); above the budget
            :class:`~ctxstair.errors.TooLargeError` is raised before anything is computed.

    Returns:
        ``{"value", "key", "query"}``, each float64 (V, d); row α is that path's part of
        ``∇_{W_E[α]} mean_n f(X_n)[y_n]`` and the three sum to it. Tokens absent from X get zeros.
    """
    if "W_pos" in params:
        raise InputError("attention_label_paths models no positional embeddings (SPEC §6.3); drop W_pos, "
                         "or use attention_path_gradients, which accepts it")
    p, X, c = _prepare(params, X, scale)
    V, L, last = p["W_E"].shape[0], X.shape[1], X.shape[1] - 1
    y = check_labels(y, X.shape[0], V)
    ids, labels = np.unique(X), np.unique(y)
    check_dense_size((ids.size, labels.size, ids.size, ids.size), max_bytes, "attention moment K2 (α, ν, x_L, x_t)",
                     "use fewer distinct tokens or labels")
    A, _ = attention_forward(p, X, c)
    subsets = dict(tokens=ids, labels=labels, context=ids, max_bytes=max_bytes)
    count = L * occurrence(X, V)[ids]  # L r_α: mean count of α per sample

    def moment(positions, attention_at=None):
        """``L r_α φ_α ⊙ ψ_α`` = mean over samples of ``Σ_s 1{x_s = α} a_s (a_t) 1{y = ν, x_positions = β}``."""
        psi = attention_label_signature(X, y, A, V, positions, attention_at, **subsets)
        phi = (position_label_signature(X, y, V, positions, **subsets) if positions
               else label_signature(X, y, 0, V, tokens=ids, labels=labels, max_bytes=max_bytes))
        phi *= psi  # in place: these are the largest arrays here
        phi *= count.reshape((-1,) + (1,) * (phi.ndim - 1))
        return phi

    K1 = moment((last,))
    K2 = moment((last, 0), attention_at=0)
    for t in range(1, L):
        K2 += moment((last, t), attention_at=t)
    W = p["W_E"][ids]
    U = (p["W_U"] @ p["W_O"] @ p["W_V"])[labels]  # rows u_ν of M
    G = U @ W.T  # (Y, T): u_ν · w_β
    W_QK = p["W_K"].T @ p["W_Q"]
    # Row convention: the column vector W_QK v is the row v @ W_QK.T, and W_QK^T v is v @ W_QK.
    paths = {
        "value": moment(()) @ U,
        "key": c * _logit_path(K1, K2, G, W, "na") @ W_QK.T,
        "query": c * _logit_path(K1.transpose(2, 1, 0), K2.transpose(2, 1, 0, 3), G, W, "nb") @ W_QK,
    }
    out = {}
    for name, rows in paths.items():
        out[name] = np.zeros_like(p["W_E"])
        out[name][ids] = rows
    return out


def attention_path_gradients(params: dict, X: np.ndarray, y: np.ndarray, objective: str = "label",
                             scale: float | None = None) -> dict[str, np.ndarray]:
    """Autograd reference: gradients w.r.t. ``W_E`` through each use of the embeddings, float64 (SPEC §6.3).

    Three copies of ``W_E`` are separate leaves, used for the values, the keys and the query; a
    second pass with one shared leaf gives the full gradient independently. Each pass is vectorised
    over the batch.

    Args:
        params: as :func:`attention_forward`; with ``W_pos (L, d)`` every use is ``W_E[x_s] + W_pos[s]``
            and the gradients are still with respect to ``W_E`` only.
        X: int (n, L) token ids; y: int (n,) labels.
        objective: a key of :data:`PATH_OBJECTIVES` — ``"label"`` (``mean f[y]``) or ``"loss"``
            (``−mean cross-entropy``, so the result is the flow direction ``−∇ loss``).
        scale: logit scale ``c`` (default ``1/√d``).

    Returns:
        ``{"value", "key", "query", "full"}``, each float64 (V, d).
    """
    if objective not in PATH_OBJECTIVES:
        raise InputError(f"unknown objective {objective!r}; allowed: {', '.join(PATH_OBJECTIVES)}")
    p, X, c = _prepare(params, X, scale)
    y = torch.from_numpy(check_labels(y, X.shape[0], p["W_E"].shape[0]))
    t, X = _to_torch(p), torch.from_numpy(X)
    target = PATH_OBJECTIVES[objective]
    uses = [t["W_E"].clone().requires_grad_() for _ in range(3)]
    value, key, query = torch.autograd.grad(target(_forward(t, *uses, X, c)[1], y), uses)
    shared = t["W_E"].clone().requires_grad_()
    (full,) = torch.autograd.grad(target(_forward(t, shared, shared, shared, X, c)[1], y), shared)
    return {"value": value.numpy(), "key": key.numpy(), "query": query.numpy(), "full": full.numpy()}


def _forward(t: dict, value_emb: torch.Tensor, key_emb: torch.Tensor, query_emb: torch.Tensor, X: torch.Tensor,
             c: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention (n, L) and logits (n, V) of the model's own forward pass (:func:`ctxstair.models.attention.attend`)
    for one member, with the embedding matrix used for values, keys and query given separately."""
    weights = {k: v[None] for k, v in t.items() if k != "W_E"}
    a, f = attend(weights, X, value_emb[None], key_emb[None], query_emb[None], c)
    return a[0], f[0]


def _logit_path(S1: np.ndarray, S2: np.ndarray, G: np.ndarray, W: np.ndarray, first: str) -> np.ndarray:
    """The bracket of the key or query path (module docstring), (T, d); ``G[ν, β] = u_ν·w_β``.

    ``first`` names the dot product in the first term: ``"na"`` = ``u_ν·w_α`` (key), ``"nb"`` =
    ``u_ν·w_β`` (query); the second term is ``Σ_{ν,β,γ} S2_α(ν,β,γ) (u_ν·w_γ) w_β`` for both."""
    return (np.einsum(f"anb,{first},bd->ad", S1, G, W, optimize=True)
            - np.einsum("anbg,ng,bd->ad", S2, G, W, optimize=True))


def _prepare(params: dict, X: np.ndarray, scale: float | None) -> tuple[dict, np.ndarray, float]:
    """Check the parameters against each other and X; return float64 copies, X as int64 and the scale."""
    missing = [k for k in _REQUIRED if k not in params]
    unknown = [k for k in params if k not in _REQUIRED + ("W_pos",)]
    if missing or unknown:
        raise InputError(f"params must hold {', '.join(_REQUIRED)} and optionally W_pos; "
                         f"missing {missing}, unknown {unknown}")
    p = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
    for k, v in p.items():
        if v.ndim != 2:
            raise InputError(f"{k} must be a matrix, got shape {v.shape}")
    (V, d), d_k, d_v = p["W_E"].shape, p["W_Q"].shape[0], p["W_V"].shape[0]
    X = check_sequences(X, V)
    expected = {"W_Q": (d_k, d), "W_K": (d_k, d), "W_V": (d_v, d), "W_O": (d, d_v), "W_U": (V, d),
                "W_pos": (X.shape[1], d)}
    for k, shape in expected.items():
        if k in p and p[k].shape != shape:
            raise InputError(f"{k} must have shape {shape} (V={V}, d={d}, d_k={d_k}, d_v={d_v}, L={X.shape[1]}), "
                             f"got {p[k].shape}")
    if scale is None:
        return p, X, 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer)) or not math.isfinite(scale):
        raise InputError(f"scale must be a finite number, got {scale!r}")
    return p, X, float(scale)


def _to_torch(p: dict) -> dict:
    return {k: torch.from_numpy(v) for k, v in p.items()}

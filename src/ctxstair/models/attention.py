"""The attention-only model as a batched ensemble (SPEC §5, §6.3).

For a sequence X = (x_1..x_L), with e_s = w^E_{x_s} + p_s (learned positional embedding p_s):

    q     = W_Q e_L                          (d_k,)   query of the last position
    k_s   = W_K e_s                          (d_k,)
    z_s   = k_s · q / √d                     attention logits over s = 1..L
    a     = softmax(z)                       (L,)
    f(X)  = W_U W_O W_V Σ_s a_s e_s          (V,)     logits, predicted from the last position

No residual, no normalisation, no FFN, no biases (SPEC §5, paper settings d = 128, d_k = 64). The
paper's causal mask lets position s attend to positions ≤ s; only the last position predicts here
and it sees every position, so the mask changes nothing and is not applied. The logits are scaled
by 1/√d (SPEC §5, §6.3), not 1/√d_k. With ``positional=False`` the model is exactly the analysis
model of SPEC §6.3 (:func:`ctxstair.theory.attention_label_paths`).

K members are stacked along a first axis (``W_E`` (K, V, d), ``W_pos`` (K, L, d), ``W_Q`` and
``W_K`` (K, d_k, d), ``W_V`` (K, d_k, d), ``W_O`` (K, d, d_k), ``W_U`` (K, V, d)) and run as one
batched computation; members share d and d_k and differ in seed. Each member's weights depend
only on its own seed and the γ's (SPEC §4: std ``d_in^-γ``, embeddings and positions with
``d_in = d``; Q, K, V read e ∈ R^d; O reads R^{d_k}; U reads R^d).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from ctxstair.errors import InputError
from ctxstair.models.init import MemberSpec, gamma_normal_, member_specs, realised_std, resolve_gamma

if TYPE_CHECKING:
    from ctxstair.config import RunConfig
    from ctxstair.tasks import Dataset


class AttentionEnsemble(torch.nn.Module):
    """K single-head attention-only models trained together (SPEC §5)."""

    def __init__(self, vocab_size: int, seq_len: int, members: Sequence[MemberSpec], *, gamma_qk: float,
                 gamma_ov: float, d_k: int = 64, positional: bool = True, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.members = tuple(members)
        widths = {m.d for m in self.members}
        if len(widths) != 1:
            raise InputError(f"attention ensemble members must share one width d, got {sorted(widths)}")
        d = widths.pop()
        self.d, self.d_k, self.positional = d, d_k, positional
        #: γ of each member's tensors: embeddings/positions, W_Q/W_K, W_V/W_O, W_U (SPEC §4).
        self.gammas = [
            {"embedding": m.gamma_embedding, "qk": gamma_qk, "ov": gamma_ov, "unembedding": m.gamma_unembedding}
            for m in self.members
        ]
        # name: (shape of one member, d_in, γ component); drawn in this order from the member's seed.
        layout = {"W_E": ((vocab_size, d), d, "embedding")}
        if positional:
            layout["W_pos"] = ((seq_len, d), d, "embedding")
        layout |= {"W_Q": ((d_k, d), d, "qk"), "W_K": ((d_k, d), d, "qk"), "W_V": ((d_k, d), d, "ov"),
                   "W_O": ((d, d_k), d_k, "ov"), "W_U": ((vocab_size, d), d, "unembedding")}
        stacks = {name: torch.empty(len(self.members), *shape, dtype=dtype) for name, (shape, _, _) in layout.items()}
        for k, (m, gammas) in enumerate(zip(self.members, self.gammas)):
            gen = torch.Generator().manual_seed(m.seed)
            for name, (_shape, d_in, component) in layout.items():
                gamma_normal_(stacks[name][k], d_in, gammas[component], gen)
        for name, tensor in stacks.items():
            setattr(self, name, torch.nn.Parameter(tensor))

    def attention(self, X: torch.Tensor) -> torch.Tensor:
        """Attention a (K, n, L) of the last position over all positions, for token ids X (n, L)."""
        return attend(self.weights(), X, self.W_E, self.W_E, self.W_E, 1 / math.sqrt(self.d))[0]

    def forward(self, X: torch.Tensor, members: slice = slice(None)) -> torch.Tensor:
        """Logits (k, n, V) of ``members`` (default all K) for token ids X (n, L)."""
        weights = {name: W[members] for name, W in self.weights().items()}
        W_E = weights["W_E"]
        return attend(weights, X, W_E, W_E, W_E, 1 / math.sqrt(self.d))[1]

    def weights(self) -> dict[str, torch.Tensor]:
        """Every parameter by name, each (K, ...)."""
        return dict(self.named_parameters())

    def member_rows(self) -> list[dict[str, float]]:
        """One row per member for ``members.csv``: seed, d, γ of each component and the realised
        standard deviation of every tensor at initialization (SPEC §4)."""
        return [
            {"seed": m.seed, "d": m.d, **{f"gamma_{c}": g for c, g in gammas.items()},
             **{f"init_std_{name}": realised_std(p[k]) for name, p in self.named_parameters()}}
            for k, (m, gammas) in enumerate(zip(self.members, self.gammas))
        ]


def attend(weights: dict[str, torch.Tensor], X: torch.Tensor, value_emb: torch.Tensor, key_emb: torch.Tensor,
           query_emb: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention (K, n, L) and logits (K, n, V) of the attention-only model (module docstring).

    ``weights`` holds ``W_Q``, ``W_K``, ``W_V``, ``W_O``, ``W_U`` and optionally ``W_pos``, each with a
    leading member axis K; the embedding matrix (K, V, d) is passed three times, for its use as
    values, keys and query, so that the gradient through one use can be taken alone
    (:func:`ctxstair.theory.attention_path_gradients`); the model passes ``W_E`` each time. X: int
    (n, L) token ids; ``scale`` multiplies the logits ``k_s · q`` (1/√d in the model).
    """
    W = weights
    n, L = X.shape
    P = W["W_pos"][:, :L] if "W_pos" in W else value_emb.new_zeros(value_emb.shape[0], L, value_emb.shape[2])
    M = W["W_U"] @ W["W_O"] @ W["W_V"]  # (K, V, d)
    # Every linear map is split over e_s = w_{x_s} + p_s into a token part, computed once for the V
    # vocabulary rows and then picked per position, and a position part: batch tensors are (n, V) or
    # (n, L) instead of n·L gathered rows of width d — several times faster on the parity task.
    T = lambda A: A.transpose(1, 2)  # noqa: E731
    query = (query_emb @ T(W["W_Q"]))[:, X[:, -1]] + (P[:, -1:] @ T(W["W_Q"]))  # (K, n, d_k)
    index = X.expand(value_emb.shape[0], n, L)
    z = (query @ T(key_emb @ T(W["W_K"]))).gather(2, index) + query @ T(P @ T(W["W_K"]))  # (K, n, L): k_s · q
    a = torch.softmax(scale * z, dim=-1)
    mass = a.new_zeros(*a.shape[:2], value_emb.shape[1]).scatter_add(2, index, a)  # (K, n, V): Σ_s a_s 1{x_s = β}
    return a, mass @ (value_emb @ T(M)) + a @ (P @ T(M))  # f = M Σ_s a_s (w_{x_s} + p_s)


def from_config(cfg: RunConfig, dataset: Dataset) -> AttentionEnsemble:
    """The attention-only ensemble of ``cfg`` for ``dataset`` (the model-kind protocol of
    :mod:`ctxstair.models`)."""
    m = cfg.model
    return AttentionEnsemble(dataset.vocab_size, dataset.seq_len, member_specs(cfg),
                             gamma_qk=resolve_gamma(m.init.gamma, m.init.qk),
                             gamma_ov=resolve_gamma(m.init.gamma, m.init.ov),
                             d_k=m.d_k, positional=m.positional, dtype=getattr(torch, cfg.train.dtype))

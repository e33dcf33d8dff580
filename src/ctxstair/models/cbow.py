"""The CBOW-type feed-forward model as a batched ensemble (SPEC §5).

    f(X) = W_U σ(Σ_{i=1}^L w^E_{x_i})      no biases, no normalisation, no positions

Two settings the paper leaves open are options, off by default: ``bias``, a trainable hidden bias
b (K, d_max) started at zero, f = W_U σ(h + b); ``pool="mean"``, h = Σ_i w^E_{x_i} / L. Padded
coordinates stay zero with a bias too: their b starts at zero and gets no gradient (W_U's padded
columns are zero).

K members are stored stacked, ``W_E`` and ``W_U`` of shape (K, V, d_max), and run as one batched
computation. Members may differ in seed, γ and width d: a member of width d < d_max is zero-padded.
Padding stays exactly zero under training because σ(0) = 0 for every activation here, so a padded
coordinate produces no logit and receives no gradient (and Adam/AdamW leave zero-gradient zeros
at zero). Each member's initial weights depend only on its own seed, γ and d, not on the other
members, so member results do not depend on the ensemble they were trained in.

Embedding modes (SPEC §8 F8b; ``model.embedding``): ``trainable`` (the default, W_E a parameter);
``signature``, fixed embeddings w_α = λ R φ^{y;1}_α v with the order-1 label signature φ^{y;1}_α
(labels × context) of token α, R ∈ R^{d × labels} and v ∈ R^{context} random N(0, 1) and fixed;
``random``, fixed random embeddings w_α = λ v_α with v_α ∈ R^d N(0, 1). In both fixed modes the
directions are drawn from the member's seed after its W_E and W_U (so W_U starts identical in every
mode), divided by their root mean square over the entries of the rows that are not zero (rows of
tokens that never occur stay zero), kept as a buffer ``E_fixed`` (K, V, d_max), and only the scalar
``lam`` (K,) of each member is trained, initialised to d^-γ_embedding: the embeddings start at the
γ-init scale per coordinate (SPEC §4). ``W_E`` is then the computed tensor λ E_fixed; it is what
``state_dict()`` (and so every snapshot) holds under the name ``W_E``, next to ``lam`` and ``W_U``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from ctxstair.errors import InputError
from ctxstair.models.activations import activation_fn
from ctxstair.models.init import MemberSpec, gamma_normal_, member_specs, realised_std
from ctxstair.signatures import label_signature

if TYPE_CHECKING:
    from ctxstair.config import RunConfig
    from ctxstair.tasks import Dataset


class CBOWEnsemble(torch.nn.Module):
    """K CBOW models trained together. ``W_E``, ``W_U``: (K, V, d_max) parameters (rows = tokens); with
    fixed embeddings ``W_E`` = ``lam`` (K,) × the buffer ``E_fixed`` (module docstring)."""

    def __init__(self, vocab_size: int, members: Sequence[MemberSpec], activation: str = "relu",
                 coeffs: Sequence[float] = (), power: int = 2, dtype: torch.dtype = torch.float32,
                 embedding: str = "trainable", phi1: np.ndarray | None = None, bias: bool = False,
                 pool: str = "sum"):
        """``embedding``: ``trainable``, ``signature`` or ``random`` (module docstring); ``phi1``: the
        order-1 label signature (vocab_size, labels, context) of every token id, for ``signature``;
        ``bias``: a trainable hidden bias started at zero; ``pool``: ``sum`` or ``mean`` of the
        context embeddings."""
        super().__init__()
        if embedding not in ("trainable", "signature", "random"):
            raise InputError(f"embedding must be trainable, signature or random; got {embedding!r}")
        if (embedding == "signature") != (phi1 is not None):
            raise InputError("phi1 (vocab_size, labels, context) is needed for, and only for, embedding='signature'")
        if pool not in ("sum", "mean"):
            raise InputError(f"pool must be sum or mean; got {pool!r}")
        self.pool = pool
        #: How ``Σ_i w^E_{x_i}`` is computed for a batch of n samples (n → ``gather`` or ``counts``), as
        #: the training engine's execution plan says; a batch size it does not name follows
        #: :func:`embedding_sum_method`.
        self.embedding_sum_by_samples: dict[int, str] = {}
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
            if embedding != "trainable":
                W_E[k, :, : m.d] = fixed_directions(vocab_size, m.d, gen, phi1)
        self.W_U = torch.nn.Parameter(W_U)
        self.b = torch.nn.Parameter(torch.zeros(len(self.members), 1, d_max, dtype=dtype)) if bias else None
        if embedding == "trainable":
            self.W_E = torch.nn.Parameter(W_E)
            return
        self.register_buffer("E_fixed", W_E, persistent=False)
        self.lam = torch.nn.Parameter(torch.tensor([float(m.d) ** -m.gamma_embedding for m in self.members],
                                                   dtype=dtype))
        self.register_state_dict_post_hook(_add_computed_embeddings)
        self.register_load_state_dict_pre_hook(_drop_computed_embeddings)

    def __getattr__(self, name: str):
        """``W_E`` of a fixed-embedding ensemble: the computed λ E_fixed (K, V, d_max)."""
        if name == "W_E" and "lam" in self._parameters:
            return self.lam[:, None, None] * self.E_fixed
        return super().__getattr__(name)

    def forward(self, X: torch.Tensor, members: slice = slice(None)) -> torch.Tensor:
        """Logits (k, n, V) of ``members`` (default all K) for token ids X (n, L)."""
        h = embedding_sum(self.W_E[members], X, self.embedding_sum_by_samples.get(X.shape[0]))
        if self.pool == "mean":
            h = h / X.shape[1]
        if self.b is not None:
            h = h + self.b[members]
        return self.sigma(h) @ self.W_U[members].transpose(1, 2)

    def member_rows(self) -> list[dict[str, float]]:
        """One row per member for ``members.csv``: seed, d, γ's and the realised standard deviation
        of its W_E and W_U over its own d columns (SPEC §4)."""
        return [
            {"seed": m.seed, "d": m.d, "gamma_embedding": m.gamma_embedding, "gamma_unembedding": m.gamma_unembedding,
             "init_std_W_E": realised_std(self.W_E[k, :, : m.d]), "init_std_W_U": realised_std(self.W_U[k, :, : m.d])}
            for k, m in enumerate(self.members)
        ]


#: Below this many multiply-adds per member (n · V · d), ``Σ_i w^E_{x_i}`` is a dense count matmul;
#: from it on, a gather (benchmarks/ensemble.py measured both on the 2-core machine: at n · V · d =
#: 33,600 the matmul is 2× faster, at 16.6 M the gather is 3.7× faster for one member).
GATHER_MIN_WORK = 1 << 20
#: The two ways of computing the embedding sum (:func:`embedding_sum`).
EMBEDDING_SUM_METHODS = ("gather", "counts")


def embedding_sum_method(n: int, vocab_size: int, d: int) -> str:
    """The rule for the embedding sum of n samples over a (V, d) table (docs/design.md, "Execution
    plan"): ``counts`` below :data:`GATHER_MIN_WORK` multiply-adds per member, ``gather`` from it on.
    The two agree up to rounding only, so the rule depends on the shapes alone."""
    return "counts" if n * vocab_size * d < GATHER_MIN_WORK else "gather"


def embedding_sum(W_E: torch.Tensor, X: torch.Tensor, method: str | None = None) -> torch.Tensor:
    """``h = Σ_i w^E_{x_i}`` (K, n, d) for embeddings W_E (K, V, d) and token ids X (n, L) (SPEC §5).

    ``method`` (default: :func:`embedding_sum_method`): ``counts``, the count matrix ``N(X) @ W_E``,
    one dense matmul, cheapest when per-call overhead dominates; ``gather``, the L rows of each
    sample (``embedding`` over the K stacked tables), L/(2V) of the matmul's work; on the CPU the
    gather runs as compiled loops that give torch's bits without its (K, n, L, d) intermediates
    (:mod:`ctxstair.models.kernels`). Both are deterministic on CPU and agree up to rounding."""
    K, V, d = W_E.shape
    if (method or embedding_sum_method(X.shape[0], V, d)) == "counts":
        counts = torch.zeros(X.shape[0], V, dtype=W_E.dtype, device=W_E.device)
        counts.scatter_add_(1, X, torch.ones_like(X, dtype=W_E.dtype))
        return counts @ W_E
    rows = X + torch.arange(K, device=X.device)[:, None, None] * V  # member k's rows start at k·V
    if W_E.device.type == "cpu":
        from ctxstair.models import kernels  # numba is imported only where a gather runs on the CPU

        if W_E.dtype in kernels.COMPILED_DTYPES:
            return kernels.GatherSum.apply(W_E.reshape(K * V, d), rows)
    return torch.nn.functional.embedding(rows, W_E.reshape(K * V, d)).sum(dim=2)


def fixed_directions(vocab_size: int, d: int, generator: torch.Generator, phi1: np.ndarray | None) -> torch.Tensor:
    """Fixed embedding directions (vocab_size, d) of one member, float64, root mean square 1 over the
    entries of its non-zero rows: R φ^{y;1}_α v for every token α when ``phi1`` (vocab_size, labels,
    context) is given (R (d, labels), v (context,) drawn N(0, 1) in that order), else N(0, 1) rows."""
    if phi1 is None:
        E = torch.randn(vocab_size, d, generator=generator, dtype=torch.float64)
    else:
        phi = torch.as_tensor(phi1, dtype=torch.float64)
        R = torch.randn(d, phi.shape[1], generator=generator, dtype=torch.float64)
        v = torch.randn(phi.shape[2], generator=generator, dtype=torch.float64)
        E = (phi @ v) @ R.T
    rows = E.norm(dim=1) > 0
    return E / E[rows].square().mean().sqrt()


def _add_computed_embeddings(module: CBOWEnsemble, state: dict, prefix: str, metadata) -> None:
    state[prefix + "W_E"] = module.W_E.detach()


def _drop_computed_embeddings(module: CBOWEnsemble, state: dict, prefix: str, *args) -> None:
    state.pop(prefix + "W_E", None)  # derived from lam and the fixed buffer: nothing to load


def from_config(cfg: RunConfig, dataset: Dataset) -> CBOWEnsemble:
    """The CBOW ensemble of ``cfg`` for ``dataset`` (the model-kind protocol of :mod:`ctxstair.models`);
    ``model.embedding=signature`` gets the dataset's order-1 label signature φ^{y;1} of every token id
    over the labels and context ids that occur (SPEC §8 F8b)."""
    m = cfg.model
    phi1 = (label_signature(dataset.X, dataset.y, 1, dataset.vocab_size, labels=np.unique(dataset.y),
                            context=np.unique(dataset.X)) if m.embedding == "signature" else None)
    return CBOWEnsemble(dataset.vocab_size, member_specs(cfg), m.activation, m.coeffs, m.power,
                        dtype=getattr(torch, cfg.train.dtype), embedding=m.embedding, phi1=phi1, bias=m.bias,
                        pool=m.pool)

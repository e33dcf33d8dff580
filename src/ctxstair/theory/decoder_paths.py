"""Path decomposition of the embedding gradient of a decoder LM (SPEC §6.4).

The final residual stream of a decoder is a sum of summands ``c_j`` (``embed``, ``attn.ℓ``,
``mlp.ℓ``; ``pos`` for learned positions), read off the model itself by its view
(:func:`ctxstair.models.view.view_of`: any supported ``transformers`` family), each a function
of ``W_E``. With the upstream gradient
``G = ∂objective/∂stream`` (n, T, d), the chain rule splits the embedding gradient exactly:

    ∇_{W_E} objective = Σ_j (∂c_j/∂W_E)^T G  [+ unembed]     (one vector-Jacobian product per summand)

Path j is everything that reaches the objective through summand j — including the routes from
``W_E`` through earlier blocks into ``c_j`` — so the paths sum to the full gradient, while
``embed`` is the direct path: ``G`` at the positions holding α, summed. ``pos`` does not depend on
``W_E`` and has no path. A model whose unembedding *is* ``W_E`` (tied: GPT-2, Gemma, SmolLM2)
updates the shared matrix also through its output side; that is the path ``unembed``,
``(∂objective/∂logits)^T h`` for the unembedding's input ``h``, so that the paths still sum to the
gradient the shared matrix gets.

Objectives, over the pairs (x_s, x_{s+1}) with s < T-1:
``loss`` = −mean next-token cross-entropy (so the result is the gradient-flow direction, SPEC §1);
``label`` = mean logit of the next token (the label-driven part).
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch

from ctxstair.checks import check_id_subset, check_sequences
from ctxstair.errors import InputError
from ctxstair.models.loss import next_token_loss
from ctxstair.models.view import view_of

__all__ = ["DECODER_OBJECTIVES", "decoder_embedding_paths", "direct_path_prediction"]

#: Objectives of :func:`decoder_embedding_paths` and :func:`direct_path_prediction`.
DECODER_OBJECTIVES = ("loss", "label")


def decoder_embedding_paths(model: torch.nn.Module, tokens: np.ndarray, objective: str = "loss",
                            full: bool = True, rows: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Embedding gradient of ``objective`` split into the paths of the residual stream (SPEC §6.4).

    Args:
        model: a ``transformers`` causal LM of a family with a view
            (:func:`ctxstair.models.view.view_of`), on any device; its own dtype is used (float64
            for exact sums).
        tokens: int (n, T) windows, 2 <= T <= the model's positions.
        objective: ``loss`` (−mean next-token cross-entropy) or ``label`` (mean next-token logit).
        full: also return ``full``, the plain autograd gradient of ``W_E`` (one more backward pass).
        rows: token ids whose rows are returned (default all V). Each path is restricted to them as
            soon as it is computed, so a large vocabulary costs one (V, d) gradient at a time, not
            one per path; the values are those rows of the full result, bit for bit.

    Returns:
        float64 (V, d) (or (len(rows), d)) per path: ``embed``, ``attn.0``, ``mlp.0``, ... in stream
        order, then ``unembed`` for a tied model, plus ``full`` when asked; the paths sum to
        ``full`` up to rounding. The model's ``.grad`` fields, weights and modes are left untouched.
    """
    _check_objective(objective)
    view = view_of(model)
    W_E = view.embedding
    X = check_sequences(tokens, view.vocab_size, "tokens")
    if not 2 <= X.shape[1] <= view.positions:
        raise InputError(f"tokens need windows of length T >= 2 (to hold a next token) and at most the model's "
                         f"{view.positions} positions, got shape {X.shape}")
    keep = None if rows is None else torch.from_numpy(check_id_subset(rows, view.vocab_size, "rows").copy())
    X = torch.as_tensor(X, device=W_E.device)

    def restricted(g: torch.Tensor | None) -> np.ndarray:
        g = torch.zeros_like(run.embedding) if g is None else g.detach()
        return (g if keep is None else g[keep.to(g.device)]).to(torch.float64).cpu().numpy()

    def objective_of(logits: torch.Tensor) -> torch.Tensor:
        return -next_token_loss(logits, X) if objective == "loss" else logits[:, :-1].gather(-1, X[:, 1:, None]).mean()

    with torch.enable_grad(), _requiring_grad(W_E):
        run = view.forward(X)
        value = objective_of(run.logits)
        wanted = [run.stream] + ([run.head_output] if view.tied else [])
        upstream, *d_head = torch.autograd.grad(value, wanted, retain_graph=not view.sharded)  # G, (n, T, d)
        # the output side of a tied W_E, (∂objective/∂logits)^T h: (n, T, V) and (n, T, d)
        unembed = restricted(torch.einsum("ntv,ntd->vd", d_head[0], run.head_input)) if view.tied else None
        paths = {}
        for name in [name for name in run.summands if name != "pos"]:
            if view.sharded:  # FSDP2 freed the gathered weights after the last backward pass: a new pass
                run = view.forward(X)  # (deterministic: the model is in eval mode, G is still its G)
            with view.starting_at(name):  # W_E as the pass read it (under FSDP2 the gathered tensor)
                (g,) = torch.autograd.grad(run.summands[name], run.embedding, upstream,
                                           retain_graph=not view.sharded, allow_unused=True)
            paths[name] = restricted(g)
        if unembed is not None:
            paths["unembed"] = unembed
        if full:
            if view.sharded:
                run = view.forward(X)
                value = objective_of(run.logits)
            paths["full"] = restricted(torch.autograd.grad(value, run.embedding)[0])
    return paths


@contextlib.contextmanager
def _requiring_grad(weight: torch.nn.Parameter):
    """``weight`` requires grad for the paths' vector-Jacobian products (a frozen embedding too), as it
    did before afterwards."""
    before = weight.requires_grad
    weight.requires_grad_(True)
    try:
        yield
    finally:
        weight.requires_grad_(before)


def direct_path_prediction(model: torch.nn.Module, r_nt: np.ndarray, phi_nt: np.ndarray, objective: str = "loss",
                           tokens: np.ndarray | None = None) -> np.ndarray:
    """Early-training prediction of the direct (``embed``) path from the next-token signature.

    Assumption (small initialization): attention and MLP outputs are negligible against the
    embedding, so the final stream at a position holding α is the embedding summand ``e_α`` (the
    row ``W_E[α]``, scaled where the family scales it, as Gemma does; GPT-2's position embeddings
    are left out too). Then the logits there are ``ℓ_α = head(norm(e_α))``, the model's own final
    norm and unembedding (and any soft-capping of its logits), the same at every occurrence of α,
    and summing the upstream gradient over the occurrences at s < T-1 gives

        loss:   r^nt_α (∂ℓ_α/∂W_E[α])^T (φ^{y;nt}_α − p_α),   p_α = softmax(ℓ_α)
        label:  r^nt_α (∂ℓ_α/∂W_E[α])^T φ^{y;nt}_α

    (the derivative through ``e_α`` only: a tied ``W_E`` is also the head, and that side is the
    ``unembed`` path, not this one)
    — for an RMSNorm and a linear head, ``r^nt_α J_α^T W_U^T (φ − p)`` with the norm's Jacobian
    ``J_α``. Under the assumption this is the direct path exactly, not just its direction (SPEC
    §6.4: direct path ∝ ``r^nt_α W_U^T φ^{y;nt}_α``). It uses the signature and the current weights
    only: one pass of the model on windows of one token each, its final norm fed the embedding
    summand (a forward pre-hook), and one vector-Jacobian product.

    Args:
        model: a decoder with a view (:func:`ctxstair.models.view.view_of`), in its dtype.
        r_nt: float (V,) from :func:`ctxstair.signatures.next_token_occurrence`.
        phi_nt: float (len(tokens), V) from :func:`ctxstair.signatures.next_token_signature` over
            all labels.
        objective: ``loss`` or ``label`` as in :func:`decoder_embedding_paths`.
        tokens: the token subset phi_nt's rows belong to (default: all V).

    Returns:
        float64 (len(tokens), d): the predicted direct path of each token.
    """
    _check_objective(objective)
    view = view_of(model)
    V, W_E = view.vocab_size, view.embedding
    tokens = check_id_subset(tokens, V, "tokens")
    r_nt, phi_nt = np.asarray(r_nt, dtype=np.float64), np.asarray(phi_nt, dtype=np.float64)
    if r_nt.shape != (V,) or phi_nt.shape != (tokens.size, V):
        raise InputError(f"r_nt must have shape ({V},) and phi_nt ({tokens.size}, {V}) (all labels), "
                         f"got {r_nt.shape} and {phi_nt.shape}")
    ids = torch.from_numpy(tokens).to(W_E.device)
    summand: dict[str, torch.Tensor] = {}

    def keep(module, args, output):
        summand["embed"] = output

    def embedding_alone(module, args):  # the final norm reads the embedding summand, not the stream
        return (summand["embed"], *args[1:])

    handles = [model.get_input_embeddings().register_forward_hook(keep),
               model.get_submodule(view.adapter.final_norm).register_forward_pre_hook(embedding_alone)]
    try:
        with torch.enable_grad(), _requiring_grad(W_E):
            logits = model(input_ids=ids[:, None]).logits[:, 0]  # (k, V): windows of one token each
            target = torch.from_numpy(phi_nt).to(logits)
            if objective == "loss":
                target = target - torch.softmax(logits.detach(), dim=-1)
            weight = torch.from_numpy(r_nt[tokens]).to(logits)[:, None]
            # Through the embedding summand only: a tied W_E is also the head, whose side is not this path.
            (upstream,) = torch.autograd.grad((logits * (weight * target)).sum(), summand["embed"])
            (grad,) = torch.autograd.grad(summand["embed"], W_E, upstream)
    finally:
        for handle in handles:
            handle.remove()
    return grad[ids].to(torch.float64).cpu().numpy()


def _check_objective(objective: str) -> None:
    if objective not in DECODER_OBJECTIVES:
        raise InputError(f"unknown objective {objective!r}; allowed: {', '.join(DECODER_OBJECTIVES)}")

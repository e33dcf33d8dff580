"""Language-model measurements on real corpora (SPEC §7, experiment F7), vectorised over snapshots.

A corpus is an int array ``windows`` (n, T_win), one row per training window. The measurements
compare the geometry of a token set ``T`` (the most frequent word-like tokens,
:func:`eligible_tokens`) in embedding space, ``S^emb(t)``, with geometries built from corpus
statistics:

* :func:`rho_next` — ``ρ_next(t) = Corr(S^emb(t), S^next)`` on the upper triangle, where ``S^next`` is
  the cosine matrix of next-token signatures;
* :func:`prefix_probe` / :func:`shuffled_baseline` — the first-order probe ``ŵ_α = φ^{y;1}_α v``
  (labels ``ν`` from :func:`prefix_labels`) fitted on a fixed set of training tokens
  (:func:`token_split`) and scored by its MSE on pairs of held-out tokens, next to the same probe
  on signatures shuffled across tokens;
* :func:`attention_path_signature` / :func:`attention_path_correlation` — the attention-path
  signature of one layer and its correlation with the geometry of ``z_α = W_O W_V w_α``;
  :func:`attention_path_scores` — that correlation for every layer of a decoder, with its
  permutation null;
* :func:`path_shares` — each path's share of the embedding update of a decoder (SPEC §6.4).

The last two take a decoder LM — a ``transformers`` model of any family with a view
(:func:`ctxstair.models.view.view_of`), measured as it is (our runs train such models) — and a
sample of windows. These are the
primitives; :mod:`ctxstair.measure.staircase` composes them into the one measurement that the LM run's
analysis, ``ctxstair analyze-model`` and the monitor call.

Token sets are given as ids; token *indices* (``train_idx``, ``heldout_idx``) are positions within
the token set, i.e. rows of the signature and embedding arrays.
"""

from __future__ import annotations

import numpy as np
import torch

from ctxstair.alignment.probe import cosine_backward, row_cosines
from ctxstair.alignment.similarity import (
    Reference,
    compare,
    cosine_matrix,
    permuted_pearson,
    signature_cosine,
    stacked_cosines,
)
from ctxstair.checkpoints.base import weight_array
from ctxstair.checks import (
    check_dense_size,
    check_id_subset,
    check_sequences,
    check_vocab_size,
    float_array,
    int_in_range,
    phi1_array,
    positive_float,
)
from ctxstair.errors import InputError
from ctxstair.models.view import view_of
from ctxstair.signatures.frequent import label_set, most_frequent
from ctxstair.theory.decoder_paths import decoder_embedding_paths

#: Token permutations of the attention-path null (:func:`attention_path_scores`): a correlation
#: above the largest |r| over them has p < 1/NULL_PERMUTATIONS.
NULL_PERMUTATIONS = 100

#: Entries (window, query, key) per chunk in :func:`attention_path_signature`: bounds its memory.
_ATTENTION_CHUNK = 1 << 22
#: Attention entries (layer, window, head, query, key) per forward pass in :func:`attention_path_counts`
#: (512 MiB in float32): larger samples are run in chunks of windows.
_PATTERN_CHUNK = 1 << 27


def eligible_tokens(windows: np.ndarray, word_like: np.ndarray, k: int = 200) -> np.ndarray:
    """The ``k`` most frequent word-like tokens of a corpus: the token set ``T`` of SPEC §7.

    Args:
        windows: int (n, T_win) token ids in ``0..V-1``.
        word_like: bool (V,) which ids are eligible (e.g. ``TextTokenizer.word_like``); its length
            is the vocabulary size V.
        k: how many tokens, >= 1.

    Returns:
        int64 (k',) token ids, most frequent first (equal counts: smaller id first); ``k' < k`` when
        fewer than ``k`` word-like tokens occur. Tokens that never occur are never chosen.
    """
    mask = np.asarray(word_like)
    if mask.dtype != bool or mask.ndim != 1 or mask.size == 0:
        raise InputError(f"word_like must be a non-empty 1-D boolean mask over the vocabulary, got "
                         f"{mask.dtype} shape {mask.shape}")
    X = check_sequences(windows, mask.size, "windows")
    k = int_in_range("k", k, 1)
    return most_frequent(np.bincount(X.ravel(), minlength=mask.size), k, eligible=mask)


def prefix_labels(windows: np.ndarray, tokens: np.ndarray, vocab_size: int, total: int = 1000) -> np.ndarray:
    """Labels ``ν`` for the prefix signature of a token set: the tokens themselves and the most
    frequent next tokens, ``total`` in all.

    Word-like tokens alone miss most of the next-token mass (spaces, punctuation, word pieces), so
    the most frequent tokens at positions that follow another token (``windows[:, 1:]``) are added,
    by count (equal counts: smaller id first), until there are ``total`` labels or none are left.

    Args:
        windows: int (n, T_win) token ids in ``0..vocab_size-1``.
        tokens: int (k,) the token set (always included).
        vocab_size: V.
        total: size of the label set (fewer if fewer tokens occur; ``k`` if ``total < k``).

    Returns:
        int64 sorted label ids.
    """
    vocab_size = check_vocab_size(vocab_size)
    X = check_sequences(windows, vocab_size, "windows")
    tokens = check_id_subset(tokens, vocab_size, "tokens")
    total = int_in_range("total", total, 1)
    return label_set(np.bincount(X[:, 1:].ravel(), minlength=vocab_size), tokens, total)


def rho_next(W: object, phi_next: object) -> dict:
    """``ρ_next(t)``: alignment of embedding geometry with next-token signature geometry (SPEC §7).

    Args:
        W: (T, d) embedding rows of the token set, or snapshots (S, T, d).
        phi_next: (T, V) next-token signatures of the same tokens (e.g.
            :func:`ctxstair.signatures.next_token_signature` with ``tokens=``).

    Returns:
        :func:`~ctxstair.alignment.compare` of ``S^emb(t)`` with ``S^next``: ``pearson``,
        ``spearman``, ``one_minus_mse`` and ``defined``, each an (S,) array (S = 1 for one matrix).
    """
    phi = float_array(phi_next, "phi_next", min_ndim=2)
    if phi.ndim != 2:
        raise InputError(f"phi_next must have shape (T tokens, V), got shape {phi.shape}")
    return rho_next_against(W, signature_cosine(phi))


def rho_next_against(W: object, S_next: np.ndarray | Reference) -> dict:
    """:func:`rho_next` with the next-token signatures' cosine matrix ``S_next`` (T, T) already
    computed (:func:`~ctxstair.alignment.signature_cosine`), for callers that measure many times
    against the same signatures: at a vocabulary of 50k that matrix costs about 2 GFLOP. Given as a
    :class:`~ctxstair.alignment.similarity.Reference`, its triangle is not ranked again either."""
    reference = S_next if isinstance(S_next, Reference) else Reference(S_next)
    return reference.compare(stacked_cosines(_snapshots(W, reference.S.shape[-1], "S_next")))


def token_split(n_tokens: int, heldout_fraction: float = 0.25, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A fixed random split of a token set into training and held-out tokens (SPEC §7 probe).

    Args:
        n_tokens: size of the token set, >= 4.
        heldout_fraction: share of held-out tokens in (0, 1); rounded, and kept so that each side
            has at least 2 tokens (one pair).
        seed: seeds the permutation (numpy ``default_rng``).

    Returns:
        ``(train_idx, heldout_idx)``: sorted int64 indices into the token set, disjoint, together
        ``0..n_tokens-1``.
    """
    n_tokens = int_in_range("n_tokens", n_tokens, 4)
    fraction = positive_float(heldout_fraction, "heldout_fraction")
    if fraction >= 1:
        raise InputError(f"heldout_fraction must be in (0, 1), got {heldout_fraction!r}")
    n_heldout = min(max(round(fraction * n_tokens), 2), n_tokens - 2)
    order = np.random.default_rng(seed).permutation(n_tokens)
    return np.sort(order[n_heldout:]), np.sort(order[:n_heldout])


def prefix_probe(
    phi1: object,
    W: object,
    train_idx: object,
    heldout_idx: object,
    *,
    steps: int = 300,
    lr: float = 0.01,
    seed: int = 0,
    method: str = "fast",
) -> dict:
    """The first-order prefix probe of SPEC §7, fitted at every snapshot, scored on held-out tokens.

    The probe embeds token ``α`` as ``ŵ_α = φ^{y;1}_α v`` (a (Y,) vector) with one shared
    ``v ∈ R^C``. At every snapshot ``v`` is fitted by Adam to minimise the mean squared difference
    between the cosine matrix of ``ŵ`` and ``S^emb(t)`` over the pairs ``a < b`` of *training*
    tokens; only the rows of the training tokens enter the fit. It is scored by the same MSE over
    the pairs of *held-out* tokens (both tokens held out); the training MSE is never reported.
    All snapshots are one float64 torch optimisation over parameters (S, C) with loss Σ_S MSE_S,
    which is separable, so this equals independent fits. The initial ``v`` is drawn once from
    ``N(0, C^{-1/2})`` (the variance, as in SPEC §3) and shared by every snapshot. ``method="fast"``
    takes the same Adam steps in float32 with the gradient in closed form
    (:func:`ctxstair.alignment.probe.cosine_backward`); ``reference`` differentiates the float64 loss
    with autograd. They differ by rounding only; the held-out MSE is computed in float64 either way.

    Args:
        phi1: (T, Y, C) prefix signatures ``φ^{y;1}_α(ν, β)`` of the token set over Y labels and C
            context tokens (e.g. :func:`ctxstair.signatures.prefix_signature`).
        W: (T, d) embedding rows of the same tokens, or snapshots (S, T, d).
        train_idx, heldout_idx: disjoint index sets into the T tokens, >= 2 each (:func:`token_split`).
        steps: Adam steps; lr: Adam learning rate (SPEC §3 settings: 300, 0.01).
        seed: seeds the initial ``v`` (torch.Generator); deterministic on CPU.
        method: ``fast`` or ``reference`` (above).

    Returns:
        dict with ``heldout_mse`` (S,) and ``v`` (S, C), the fitted probes.
    """
    phi = phi1_array(phi1)
    emb = _snapshots(W, phi.shape[0], "phi1")
    train = _index_set(train_idx, "train_idx", phi.shape[0])
    heldout = _index_set(heldout_idx, "heldout_idx", phi.shape[0])
    if np.intersect1d(train, heldout).size:
        raise InputError("train_idx and heldout_idx must be disjoint: a held-out token may not enter the fit")
    steps = int_in_range("steps", steps, 0)
    lr = positive_float(lr, "lr")
    n_context = phi.shape[2]

    gen = torch.Generator().manual_seed(int(seed))
    v0 = torch.randn(n_context, generator=gen, dtype=torch.float64) * n_context**-0.25
    phi_t, s_emb = torch.from_numpy(phi), torch.from_numpy(stacked_cosines(emb))

    def pair_mse(idx: np.ndarray):
        """MSE over the pairs a < b of tokens ``idx``: (S, C) probes -> (S,); only their rows enter."""
        sel = torch.from_numpy(idx)
        rows, cols = torch.triu_indices(idx.size, idx.size, 1)
        phi_sel, target = phi_t[sel], s_emb[:, sel[:, None], sel[None, :]][:, rows, cols]

        def mse(v: torch.Tensor) -> torch.Tensor:
            h = torch.nn.functional.normalize(torch.einsum("tyc,sc->sty", phi_sel, v), dim=-1)
            return (((h @ h.transpose(-1, -2))[:, rows, cols] - target) ** 2).mean(dim=-1)

        return mse

    if method not in ("fast", "reference"):
        raise InputError(f"unknown probe method {method!r}; allowed: fast, reference")
    start = v0.expand(emb.shape[0], -1)
    if method == "fast":
        sel = torch.from_numpy(train)
        param = _fit_prefix_probe_fast(phi_t[sel], s_emb[:, sel[:, None], sel[None, :]], start, steps, lr)
    else:
        train_mse = pair_mse(train)
        param = start.clone().requires_grad_(True)
        optimizer = torch.optim.Adam([param], lr=lr)
        for _ in range(steps):
            optimizer.zero_grad()
            train_mse(param).sum().backward()
            optimizer.step()
    with torch.no_grad():
        return {"heldout_mse": pair_mse(heldout)(param).numpy(), "v": param.detach().numpy()}


def _fit_prefix_probe_fast(phi: torch.Tensor, target: torch.Tensor, start: torch.Tensor, steps: int,
                           lr: float) -> torch.Tensor:
    """The Adam fit of :func:`prefix_probe` in float32 with the gradient in closed form: signatures of the
    training tokens (T, Y, C), their embedding cosines (S, T, T), start (S, C) -> fitted (S, C) float64."""
    n_tokens = phi.shape[0]
    Phi = phi.float().reshape(n_tokens * phi.shape[1], phi.shape[2])
    off_diagonal = 1.0 - torch.eye(n_tokens)
    target = target.float()
    pairs = n_tokens * (n_tokens - 1) / 2
    param = start.float().clone()
    optimizer = torch.optim.Adam([param], lr=lr)
    for _ in range(steps):
        h = (param @ Phi.T).unflatten(-1, (n_tokens, -1))  # (S, T, Y)
        cos, inv_norm = row_cosines(h)
        # The MSE over pairs a < b, on the full matrix; in place, the bits of off_diagonal * (cos − target) / pairs.
        d_cos = (cos - target).mul_(off_diagonal).div_(pairs)
        param.grad = cosine_backward(h, cos, inv_norm, d_cos).flatten(-2) @ Phi
        optimizer.step()
    return param.double()


def shuffled_baseline(
    phi1: object,
    W: object,
    train_idx: object,
    heldout_idx: object,
    *,
    steps: int = 300,
    lr: float = 0.01,
    seed: int = 0,
    method: str = "fast",
) -> dict:
    """The structure-free control of :func:`prefix_probe`: the same probe on shuffled signatures.

    The rows of ``phi1`` are permuted across tokens by a fixed permutation drawn from ``seed``
    (numpy ``default_rng``), so each token gets another token's signature; the probe is then
    fitted and scored exactly as :func:`prefix_probe` (same arguments, same seed for ``v``). A
    probe whose held-out MSE is not clearly below this baseline has found no signature structure.

    Returns:
        dict with ``heldout_mse`` (S,), ``v`` (S, C) and ``permutation`` (T,): token ``a`` was given
        the signature of token ``permutation[a]``.
    """
    phi = phi1_array(phi1)
    permutation = np.random.default_rng(seed).permutation(phi.shape[0])
    result = prefix_probe(phi[permutation], W, train_idx, heldout_idx, steps=steps, lr=lr, seed=seed, method=method)
    return {**result, "permutation": permutation}


def attention_path_signature(
    windows: np.ndarray,
    attention: object,
    vocab_size: int,
    tokens: np.ndarray,
    labels: np.ndarray | None = None,
) -> np.ndarray:
    """Attention-path signature of one layer
    ``φ^{y;attn,ℓ}_α(ν) = E[Ā_{s,I_s} 1{x_{s+1} = ν} | x_{I_s} = α]`` (SPEC §7).

    Positions are 0-based: ``s`` is uniform over the positions that have a next token
    (``0..T_win-2``) and ``I_s`` uniform over ``0..s``, every window weighing the same. So the
    numerator sums ``Ā[s, i] / (s+1)`` over the (window, s, i ≤ s) with ``x_i = α, x_{s+1} = ν`` and
    the denominator sums ``1 / (s+1)`` over those with ``x_i = α``. Only keys ``i ≤ s`` enter, as
    in causal attention. Counted with ``np.bincount`` over chunks of windows.

    Args:
        windows: int (n, T_win), T_win >= 2, token ids in ``0..vocab_size-1``.
        attention: (n, T_win, T_win) head-averaged attention of the layer, indexed (window, query
            s, key i).
        vocab_size: V.
        tokens: ids ``α`` (rows); labels: ids ``ν`` (columns), default all V.

    Returns:
        float64 (len(tokens), len(labels)); the row of a token that never sits at a position with
        a next token is zero.
    """
    return path_signature_of(attention_path_sums(windows, attention, vocab_size, tokens, labels))


def attention_path_sums(
    windows: np.ndarray,
    attention: object,
    vocab_size: int,
    tokens: np.ndarray,
    labels: np.ndarray | None = None,
) -> np.ndarray:
    """The two sums behind :func:`attention_path_signature` (same arguments), before the division:
    float64 (len(tokens), len(labels) + 1), the numerator of each (α, ν) in the first len(labels)
    columns and the denominator of α in the last (SPEC §7). Both are sums over windows, so the sums
    of a sample are the sums of its parts': a sample can be counted in pieces, in chunks or on the
    ranks of a job, and added up before :func:`path_signature_of` divides."""
    vocab_size = check_vocab_size(vocab_size)
    X = check_sequences(windows, vocab_size, "windows")
    n, T = X.shape
    if T < 2:
        raise InputError(f"windows must have length >= 2 to hold a next token, got shape {X.shape}")
    A = float_array(attention, "attention", min_ndim=3)
    if A.shape != (n, T, T):
        raise InputError(f"attention must have shape (n, T, T) = {(n, T, T)} to match windows, got {A.shape}")
    tokens = check_id_subset(tokens, vocab_size, "tokens")
    labels = check_id_subset(labels, vocab_size, "labels")
    check_dense_size((tokens.size, labels.size), None, "attention-path signature",
                     "restrict it with tokens= or labels= (subsets of token ids)")
    # Ids outside a subset go to an extra "excluded" row / column, dropped at the end.
    row = np.full(vocab_size, tokens.size, dtype=np.int64)
    row[tokens] = np.arange(tokens.size)
    col = np.full(vocab_size, labels.size, dtype=np.int64)
    col[labels] = np.arange(labels.size)
    n_cols = labels.size + 1

    query, key = np.tril_indices(T - 1)  # every (s, i) with i <= s <= T-2
    pair_weight = 1.0 / (query + 1)
    numerator = np.zeros((tokens.size + 1) * n_cols)
    chunk = max(1, _ATTENTION_CHUNK // query.size)
    for start in range(0, n, chunk):
        rows, cols = row[X[start:start + chunk]], col[X[start:start + chunk]]  # (windows, T) each
        # Only pairs whose key is a token and whose next token a label are added: the others would land
        # in the excluded row or column, which is dropped. Leaving them out keeps the order in which
        # every kept entry is added, so the sums are the same to the bit, and reads only their weights.
        window, pair = np.nonzero((rows < tokens.size)[:, key] & (cols < labels.size)[:, query + 1])
        flat = rows[window, key[pair]] * n_cols + cols[window, query[pair] + 1]
        weights = A[start + window, query[pair], key[pair]] * pair_weight[pair]
        numerator += np.bincount(flat, weights=weights, minlength=numerator.size)
    # Σ_{s=i}^{T-2} 1/(s+1): the denominator weight of key position i, summed in closed form.
    key_weight = np.cumsum((1.0 / np.arange(1, T))[::-1])[::-1]
    denominator = np.bincount(row[X[:, :-1]].ravel(), weights=np.tile(key_weight, n), minlength=tokens.size + 1)
    return np.concatenate([numerator.reshape(tokens.size + 1, n_cols)[:-1, :-1], denominator[:-1, None]], axis=1)


def path_signature_of(sums: np.ndarray) -> np.ndarray:
    """The attention-path signature (k, L) from its sums (k, L + 1) (:func:`attention_path_sums`):
    numerator over denominator, and a zero row where the denominator is 0 (SPEC §7)."""
    numerator, rows = sums[:, :-1], sums[:, -1:]
    return np.divide(numerator, rows, out=np.zeros_like(numerator), where=rows > 0)


def attention_path_correlation(phi_attn: object, Z: object) -> float:
    """Pearson r between the upper triangles of ``S(φ^{attn,ℓ})`` and ``S(z)`` (SPEC §7).

    Args:
        phi_attn: (T, V) attention-path signatures of the token set (:func:`attention_path_signature`).
        Z: (T, d_model) rows ``z_α = W_O^ℓ W_V^ℓ w_α``; for a multi-head layer with ``W_V``
            (H·hd, d) and ``W_O`` (d, H·hd): ``Z = W_E[tokens] @ W_V.T @ W_O.T``.

    Returns:
        float; NaN when either triangle is constant (see :func:`~ctxstair.alignment.compare`).
    """
    phi = float_array(phi_attn, "phi_attn", min_ndim=2)
    z = float_array(Z, "Z", min_ndim=2)
    if phi.ndim != 2 or z.ndim != 2 or phi.shape[0] != z.shape[0]:
        raise InputError(f"phi_attn (T, V) and Z (T, d_model) must be matrices over the same T tokens, "
                         f"got shapes {phi.shape} and {z.shape}")
    return compare(cosine_matrix(z), signature_cosine(phi))["pearson"]


@torch.no_grad()
def attention_path_counts(model, sample: object, tokens: object, vocab_size: int) -> np.ndarray:
    """Every layer's attention-path sums of a decoder on a sample (SPEC §7): float64
    (layers, len(tokens), vocab_size + 1), layer ℓ's :func:`attention_path_sums` over all
    ``vocab_size`` labels, read from the model's post-softmax attention on ``sample`` averaged over
    heads, in the model's dtype (the LM runs use float32).

    The forward pass runs on chunks of windows when the attention of all of them would exceed 2^27
    entries, and each chunk's sums are added as it is counted, so memory is bounded by one chunk
    whatever the sample's size. Being sums over windows, the counts of a sample split into parts
    are the sums of the parts' counts.

    Args:
        model: a decoder with a view (:func:`ctxstair.models.view.view_of`), on any device.
        sample: int (n, T_win) token windows, 2 <= T_win <= the model's positions (numpy or torch).
        tokens: int (k,) the token set (ids).
        vocab_size: V.
    """
    view = view_of(model)
    X = check_sequences(np.asarray(sample), vocab_size, "sample")
    tokens = check_id_subset(tokens, vocab_size, "tokens")
    chunk = pattern_windows(view, X.shape[1])
    counts = np.zeros((view.n_layers, tokens.size, vocab_size + 1))
    for start in range(0, X.shape[0], chunk):
        part = X[start:start + chunk]
        windows = torch.from_numpy(part).to(view.embedding.device)
        pattern = weight_array(view.attention_pattern(windows, average_heads=True))  # (layers, n, T, T)
        for layer in range(view.n_layers):
            counts[layer] += attention_path_sums(part, pattern[layer], vocab_size, tokens)
    return counts


def pattern_windows(view, T: int) -> int:
    """How many windows of length ``T`` one forward pass of :func:`attention_path_counts` takes on the
    model of ``view`` (a :func:`ctxstair.models.view.view_of` answer): as many as keep the attention
    of the pass within 2^27 entries, at least one."""
    return max(1, _PATTERN_CHUNK // (view.n_layers * view.n_heads * T**2))


def attention_path_scores(model, sample: object, tokens: object, vocab_size: int,
                          permutations: int = NULL_PERMUTATIONS,
                          counts: np.ndarray | None = None) -> list[tuple[int, float, float]]:
    """Attention-path correlation of every layer of a decoder, with its permutation null (SPEC §7).

    For layer ℓ: the attention-path signature ``φ^{y;attn,ℓ}`` of the token set over all
    ``vocab_size`` labels (:func:`attention_path_counts` on ``sample``, divided by
    :func:`path_signature_of`), against ``z_α = W_O^ℓ W_V^ℓ w_α`` for the embedding rows ``w_α`` of
    the tokens (:func:`attention_path_correlation`). The null is the largest |r| between the same
    two cosine matrices after permuting the signature rows across tokens, over ``permutations``
    permutations drawn from ``numpy.random.default_rng(ℓ)``: a correlation above it has
    p < 1/permutations.

    Args:
        model: a decoder with a view (:func:`ctxstair.models.view.view_of`), on any device.
        sample: int (n, T_win) token windows, 2 <= T_win <= the model's positions (numpy or torch).
        tokens: int (k,) the token set (ids).
        vocab_size: V, the labels of the signature (the model's vocabulary or the tokenizer's).
        permutations: size of the null, >= 1.
        counts: :func:`attention_path_counts` of ``sample`` when counted already (the monitor adds
            up the parts the ranks of a sharded job counted); ``sample`` is then not run.

    Returns:
        ``[(layer, corr, null), ...]``, one per layer, floats; ``corr`` is NaN when a cosine triangle
        is constant.
    """
    view = view_of(model)
    tokens = check_id_subset(tokens, vocab_size, "tokens")
    permutations = int_in_range("permutations", permutations, 1)
    if counts is None:
        counts = attention_path_counts(model, sample, tokens, vocab_size)
    elif counts.shape != (view.n_layers, tokens.size, vocab_size + 1):
        raise InputError(f"counts must have shape (layers, tokens, V + 1) = "
                         f"{(view.n_layers, tokens.size, vocab_size + 1)}, got {counts.shape}")
    W_E = weight_array(view.rows(view.embedding, torch.from_numpy(tokens)))
    scores = []
    for layer in range(view.n_layers):
        phi_attn = path_signature_of(counts[layer])
        W_V, W_O = view.value_output(layer)
        Z = W_E @ weight_array(W_V).T @ weight_array(W_O).T
        shuffles = np.random.default_rng(layer).permuted(np.tile(np.arange(tokens.size), (permutations, 1)), axis=1)
        null = permuted_pearson(signature_cosine(phi_attn), cosine_matrix(Z), shuffles)
        scores.append((layer, attention_path_correlation(phi_attn, Z), float(np.nanmax(np.abs(null)))))
    return scores


def path_shares(model, sample: object, tokens: object) -> dict[str, float]:
    """Each path's share of the embedding update of a decoder on a sample (SPEC §6.4).

    The update ``−∇_{W_E} loss`` (mean next-token cross-entropy over ``sample``) is split into the
    direct path ``embed`` and one path per attention layer and MLP (``attn.ℓ``, ``mlp.ℓ``) by
    :func:`ctxstair.theory.decoder_paths.decoder_embedding_paths`; the paths sum to the whole
    update. Restricted to the rows of ``tokens``, path j has Frobenius norm ``n_j``, and its share
    is ``n_j / Σ_i n_i`` (the shares sum to 1; they measure sizes, not directions). Computed in
    the model's dtype.

    Args:
        model: a decoder with a view (:func:`ctxstair.models.view.view_of`), on any device.
        sample: int (n, T_win) token windows, 2 <= T_win <= the model's positions.
        tokens: int (k,) token ids whose rows count.

    Returns:
        path name -> share, in the order ``embed, attn.0, mlp.0, attn.1, ...``, then ``unembed`` for a
        model whose unembedding is tied to ``W_E``; NaN everywhere when every path is zero on those rows.
    """
    paths = decoder_embedding_paths(model, np.asarray(sample), objective="loss", full=False, rows=tokens)
    norms = {name: float(np.linalg.norm(g)) for name, g in paths.items()}
    total = sum(norms.values())
    return {name: n / total if total > 0 else float("nan") for name, n in norms.items()}


def _snapshots(W: object, n_tokens: int, against: str) -> np.ndarray:
    """Check embeddings (T, d) or snapshots (S, T, d) with T = ``n_tokens``; return (S, T, d)."""
    arr = float_array(W, "W", min_ndim=2)
    arr = arr[None] if arr.ndim == 2 else arr
    if arr.ndim != 3 or arr.shape[1] != n_tokens:
        raise InputError(f"W must have shape (T, d) or (S snapshots, T, d) with T = {n_tokens} tokens as in "
                         f"{against}, got shape {arr.shape}")
    return arr


def _index_set(idx: object, name: str, n_tokens: int) -> np.ndarray:
    """Check >= 2 distinct indices in ``0..n_tokens-1``; return them as int64 (k,)."""
    arr = np.asarray(idx)
    if arr.dtype.kind not in "iu" or arr.ndim != 1 or arr.size < 2:
        raise InputError(f"{name} must be a 1-D list of at least 2 token indices, got {arr.dtype} shape {arr.shape}")
    if arr.min() < 0 or arr.max() >= n_tokens or np.unique(arr).size != arr.size:
        raise InputError(f"{name} must hold distinct token indices in 0..{n_tokens - 1}")
    return arr.astype(np.int64)

"""Anchor tasks of SPEC §8 (F2a, F5b, S72, row C) and the lineage tasks of SPEC §9.

An *anchor* is a token that selects or shifts how the other tokens of a sequence map to the label.
Complete enumerations (``label_law``, ``minmax``, ``two_anchor``) list every sequence once in
lexicographic order (first position slowest); the sampled tasks (``parity``, ``composite``,
``reason_memory``) draw their samples once from ``np.random.default_rng(seed)``, so the same
parameters give the same bytes. Token-id groups are in ``meta["groups"]`` (int64 arrays).
"""

from __future__ import annotations

import math

import numpy as np

from ctxstair.checks import MAX_INT, check_choice, check_disjoint, check_float, check_int, check_rows
from ctxstair.errors import InputError
from ctxstair.tasks.common import check_id_range, numbers, product_grid
from ctxstair.tasks.dataset import Dataset
from ctxstair.tasks.registry import register

#: Largest lookup table / tuple enumeration the sampled tasks build (entries).
MAX_TABLE = 10_000_000

LABEL_LAWS = ("uniform", "normal", "poisson", "exp")


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def _check_tuple(name: str, value: object, length: int | None = None,
                 allowed: np.ndarray | None = None, why: str = "", allowed_by: str = "") -> tuple[int, ...]:
    """Check a tuple of ints of absolute value at most ``MAX_INT`` (of ``length`` entries, ``why``
    saying which parameter sets it; each in ``allowed`` when given, ``allowed_by`` naming the
    parameters that set those ids: a default tuple that another parameter has made invalid is then
    refused naming the parameter the user did set)."""
    if not isinstance(value, (tuple, list)) or any(
        isinstance(v, bool) or not isinstance(v, (int, np.integer)) or abs(int(v)) > MAX_INT for v in value
    ):
        raise InputError(f"parameter {name!r} must be a tuple of integers of absolute value at most 2**60, "
                         f"got {value!r}")
    if length is not None and len(value) != length:
        source = f" ({why})" if why else ""
        raise InputError(f"parameter {name!r} must have {length} entries{source}, got {value!r}")
    if allowed is not None and not np.isin(np.asarray(value, dtype=np.int64), allowed).all():
        source = f" ({allowed_by})" if allowed_by else ""
        raise InputError(f"parameter {name!r} must only hold ids in {_describe(allowed)}{source}, got {tuple(value)!r}")
    return tuple(int(v) for v in value)


def _describe(ids: np.ndarray) -> str:
    """``lo..hi`` for a contiguous id set, else the list."""
    ids = np.asarray(ids)
    if ids.size and ids.max() - ids.min() + 1 == ids.size:
        return f"{int(ids.min())}..{int(ids.max())}"
    return str([int(v) for v in ids])


def _draw_rows(rng: np.random.Generator, rows: np.ndarray, n: int) -> np.ndarray:
    """``n`` rows drawn uniformly with replacement from ``rows`` (shape ``(k, m)``)."""
    return rows[rng.integers(0, rows.shape[0], size=n)]


def _key_anchor_sequences(rng: np.random.Generator, key: np.ndarray, pos: np.ndarray,
                          anchor_rows: np.ndarray, noise: np.ndarray, seq_len: int) -> np.ndarray:
    """Sequences with ``key`` at ``pos``, the anchor row at ``pos+1..pos+q`` and noise elsewhere.

    Noise tokens are drawn uniformly (with replacement) from ``noise`` for every position first;
    the key and anchors then overwrite their positions.
    """
    n, q = anchor_rows.shape
    X = noise[rng.integers(0, noise.size, size=(n, seq_len))]
    rows = np.arange(n)[:, None]
    X[rows[:, 0], pos] = key
    X[rows, pos[:, None] + 1 + np.arange(q)] = anchor_rows
    return X


def _row_mask(rows: np.ndarray, excluded: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows of ``rows`` that equal one of the rows of ``excluded``."""
    if excluded.size == 0:
        return np.zeros(rows.shape[0], dtype=bool)
    return (rows[:, None, :] == excluded[None, :, :]).all(axis=2).any(axis=1)


def _empty_eval(seq_len: int) -> dict[str, np.ndarray]:
    """An empty evaluation set: no sequences of length ``seq_len``, labels or key positions."""
    return {"X": np.empty((0, seq_len), dtype=np.int64), "y": np.empty(0, dtype=np.int64),
            "key_position": np.empty(0, dtype=np.int64)}


# --------------------------------------------------------------------------------------------
# F2a: one anchor with a prescribed label law
# --------------------------------------------------------------------------------------------


def label_law_probabilities(law: str, n_labels: int, mu: float = 25.0, sigma: float = 1.0,
                            lam: float = 10.0, rate: float = 5.0) -> np.ndarray:
    """The label law ``p_a`` over labels ``0..n_labels-1`` (float64, sums to 1), SPEC §8 F2a.

    ``uniform``: ``1/n_labels``; ``normal``: ``∝ exp(-(y-mu)²/(2 sigma²))``; ``poisson``: Poisson(lam)
    pmf truncated to the range and renormalised; ``exp``: ``∝ exp(-rate·y)``. Computed in log space
    so far-away centres do not underflow.
    """
    law = check_choice("law", law, LABEL_LAWS)
    y = np.arange(n_labels, dtype=np.float64)
    if law == "uniform":
        log_w = np.zeros(n_labels)
    elif law == "normal":
        log_w = -((y - mu) ** 2) / (2.0 * sigma**2)
    elif law == "poisson":
        import scipy.stats  # here, not at the top: it takes 0.6 s to import, and every task import paid it

        log_w = scipy.stats.poisson.logpmf(y, lam)
    else:
        log_w = -rate * y
    w = np.exp(log_w - log_w.max())
    return w / w.sum()


@register("label_law")
def label_law(anchor: int = 100, n_context: int = 51, law: str = "normal", mu: float = 25.0,
              sigma: float = 1.0, lam: float = 10.0, rate: float = 5.0, seed: int = 0) -> Dataset:
    """One anchor whose labels follow a prescribed law p_a: all sequences (a, x1, x2) (SPEC §8 F2a).

    Parameters:
        anchor: the anchor's token id; must not be a context id (``anchor >= n_context``).
        n_context: number of context tokens and of labels, ``>= 2``; context ids ``0..n_context-1``.
        law: ``"uniform"``, ``"normal"`` (``∝ exp(-(y-mu)²/(2 sigma²))``), ``"poisson"`` (pmf with
            mean ``lam`` truncated to ``0..n_context-1`` and renormalised) or ``"exp"``
            (``∝ exp(-rate·y)``).
        mu, sigma: centre (finite) and width (``> 0``) of the normal law.
        lam: Poisson mean, ``> 0``.
        rate: decay rate of the exponential law, ``> 0``.
        seed: seed of the label draw.

    Token ids: context tokens ``0..n_context-1``; the anchor ``anchor``; labels ``0..n_context-1``
    (the context ids). ``vocab_size = max(anchor, n_context-1) + 1``; ``tokens = [anchor]``.

    Label: each sequence's label is drawn once, independently, from ``p_a`` (then fixed).
    ``meta["label_law"]`` is ``p_a`` (float64 over labels ``0..n_context-1``).
    Samples: all ``n_context**2`` sequences ``(anchor, x1, x2)``, lexicographic in ``(x1, x2)``.
    """
    n_context = check_int("n_context", n_context, 2)
    anchor = check_int("anchor", anchor, 0)
    if anchor < n_context:
        raise InputError(f"parameter 'anchor' must not be a context id: anchor >= n_context={n_context}, got {anchor}")
    law = check_choice("law", law, LABEL_LAWS)
    mu = check_float("mu", mu)
    sigma = check_float("sigma", sigma, 0.0, lo_open=True)
    lam = check_float("lam", lam, 0.0, lo_open=True)
    rate = check_float("rate", rate, 0.0, lo_open=True)
    seed = check_int("seed", seed, 0)
    check_rows("the n_context**2 input sequences", n_context**2, 3)

    p_a = label_law_probabilities(law, n_context, mu=mu, sigma=sigma, lam=lam, rate=rate)
    context = numbers(0, n_context - 1)
    X = product_grid([anchor], context, context)
    y = np.random.default_rng(seed).choice(n_context, size=X.shape[0], p=p_a).astype(np.int64)
    meta = {"label_law": p_a, "groups": {"anchor": np.array([anchor], dtype=np.int64), "context": context}}
    return Dataset(X=X, y=y, vocab_size=max(anchor, n_context - 1) + 1,
                   tokens=np.array([anchor], dtype=np.int64), meta=meta)


# --------------------------------------------------------------------------------------------
# F5b: parity of one anchor among noise
# --------------------------------------------------------------------------------------------


@register("parity")
def parity(anchor_lo: int = 11, anchor_hi: int = 20, noise_lo: int = 21, noise_hi: int = 60,
           L: int = 8, n_samples: int = 10000, seed: int = 0) -> Dataset:
    """Parity of the single anchor among noise tokens: y = a mod 2 (SPEC §8 F5b).

    Parameters:
        anchor_lo, anchor_hi: anchor ids ``anchor_lo..anchor_hi`` (``0 <= lo <= hi``).
        noise_lo, noise_hi: noise ids ``noise_lo..noise_hi``, disjoint from the anchors.
        L: sequence length, ``>= 1``.
        n_samples: number of samples, ``>= 1``.
        seed: seed of the draw.

    Token ids: anchors and noise as given; labels ``0`` (even anchor) and ``1`` (odd anchor).
    ``vocab_size = max(anchor_hi, noise_hi, 1) + 1``; ``tokens`` = anchors then noise ids;
    ``meta["groups"] = {"anchors", "noise"}``; ``meta["anchor_position"]`` per sample.

    Label: ``y = a mod 2`` for the sample's anchor ``a``. Samples: ``n_samples`` drawn once: the
    anchor uniformly from the anchor ids, its position uniformly from ``0..L-1``, every other
    position a noise id drawn uniformly with replacement.
    """
    anchors = check_id_range("anchor_lo", anchor_lo, "anchor_hi", anchor_hi)
    noise = check_id_range("noise_lo", noise_lo, "noise_hi", noise_hi)
    check_disjoint({"anchors (anchor_lo..anchor_hi)": anchors, "noise (noise_lo..noise_hi)": noise})
    L = check_int("L", L, 1)
    n_samples = check_int("n_samples", n_samples, 1)
    seed = check_int("seed", seed, 0)
    check_rows("the n_samples input sequences of length L", n_samples, L)

    rng = np.random.default_rng(seed)
    anchor = _draw_rows(rng, anchors[:, None], n_samples)
    pos = rng.integers(0, L, size=n_samples)
    X = _key_anchor_sequences(rng, anchor[:, 0], pos, np.empty((n_samples, 0), dtype=np.int64), noise, L)
    meta = {"groups": {"anchors": anchors, "noise": noise}, "anchor_position": pos}
    return Dataset(X=X, y=anchor[:, 0] % 2, vocab_size=max(int(anchors[-1]), int(noise[-1]), 1) + 1,
                   tokens=np.concatenate([anchors, noise]), meta=meta)


# --------------------------------------------------------------------------------------------
# S72: min / max selected by an anchor
# --------------------------------------------------------------------------------------------


@register("minmax")
def minmax(N: int = 20) -> Dataset:
    """Max or min of two numbers, selected by an anchor c in {a, b}: all sequences (c, x1, x2) (SPEC §8 S72).

    Parameters:
        N: largest number, ``N >= 2``.

    Token ids: numbers ``1..N`` are ids ``1..N``; anchor ``a`` (take the max) is id ``N+1``, anchor
    ``b`` (take the min) is id ``N+2``; labels are number ids ``1..N``. ``vocab_size = N + 3``;
    ``tokens`` = numbers ``1..N`` then ``a, b``; ``meta["anchor_max"] = N+1``,
    ``meta["anchor_min"] = N+2``.

    Label: ``y = max(x1, x2)`` if ``c = a`` else ``min(x1, x2)``. Samples: all ``2 N**2``
    sequences, lexicographic (``c`` slowest: all ``a`` sequences first).
    """
    N = check_int("N", N, 2)
    check_rows("the 2 N**2 input sequences", 2 * N * N, 3)
    a, b = N + 1, N + 2
    X = product_grid([a, b], numbers(1, N), numbers(1, N))
    pair = X[:, 1:]
    y = np.where(X[:, 0] == a, pair.max(axis=1), pair.min(axis=1))
    meta = {"anchor_max": a, "anchor_min": b,
            "groups": {"numbers": numbers(1, N), "anchors": np.array([a, b], dtype=np.int64)}}
    return Dataset(X=X, y=y, vocab_size=N + 3, tokens=numbers(1, N + 2), meta=meta)


# --------------------------------------------------------------------------------------------
# Row C: two shift anchors, all order-0 signatures equal
# --------------------------------------------------------------------------------------------


@register("two_anchor")
def two_anchor(p: int = 20, shifts: tuple = (), analysed: str = "all", cross_shift: int = 0) -> Dataset:
    """Two shift anchors and one context token: y = (s(a1) + s(a2) + x) mod p, all sequences (SPEC §8 row C).

    Parameters:
        p: size of the context set and modulus, ``p >= 2``.
        shifts: the anchors' shift values, distinct, each in ``0..p-1``; one anchor per entry. Empty
            (the default): ``p`` anchors with shifts ``0..p-1``, every residue once.
        analysed: the task tokens, ``all`` (context tokens then anchors) or ``anchors`` (the paper's
            App. C plots the anchors only: with fewer shifts than residues the context tokens'
            order-0 signatures differ, the anchors' never do).
        cross_shift: ``0`` (the default) or a residue ``c`` in ``1..p-1``: every shift value then has
            two anchors, one of each of two kinds, and a pair of anchors of different kinds adds
            ``c`` to the label. The other anchor is of either kind equally often, so an anchor's
            order-1 signature depends on its shift only; its kind shows at order 2 (with the other
            anchor), which gives an order-2 structure beyond order 1 among the anchors.

    Token ids (our choice: anchors are separate token ids, not context tokens): context tokens
    ``𝒳 = 0..p-1``; anchors ``p..p+A-1`` for ``A`` shift values, anchor ``p + i`` with shift
    ``s = shifts[i]`` (default: ``s(α) = α - p``); labels ``0..p-1`` (the context ids).
    ``vocab_size = p + A``; ``tokens`` = the context ids then the anchors (``analysed="anchors"``:
    the anchors); with ``cross_shift`` the ``2S`` anchors for ``S`` shift values are ``p..p+S-1``
    (kind 0) then ``p+S..p+2S-1`` (kind 1), in the order of ``shifts`` each;
    ``meta["groups"] = {"context", "anchors"}``, ``meta["shifts"]`` the shift of each anchor,
    ``meta["kinds"]`` its kind (all 0 without ``cross_shift``).

    Label: ``y = (s(a1) + s(a2) + x + c·[kind(a1) ≠ kind(a2)]) mod p``. Every anchor's order-0 label
    signature is uniform over ``0..p-1`` (``x`` runs over every residue). When the shifts cover every
    residue (the default) the order-1 signatures of all anchors are equal as well, since the other
    anchor's shift is uniform; with fewer shifts (e.g. ``0..p/2-1``) the order-1 signatures tell the
    anchors apart while order 0 still does not.
    Samples: all ``A**2 * p`` sequences ``(a1, a2, x)``, lexicographic (``a1`` slowest).
    """
    p = check_int("p", p, 2)
    if analysed not in ("all", "anchors"):
        raise InputError(f"parameter 'analysed' must be 'all' or 'anchors', got {analysed!r}")
    shift_values = np.arange(p) if not shifts else np.asarray(
        _check_tuple("shifts", shifts, allowed=np.arange(p), allowed_by="0..p-1"), dtype=np.int64)
    if np.unique(shift_values).size != shift_values.size:
        raise InputError(f"parameter 'shifts' must hold distinct values, got {tuple(shifts)!r}")
    cross_shift = check_int("cross_shift", cross_shift, 0)
    if cross_shift >= p:
        raise InputError(f"parameter 'cross_shift' must be a residue in 0..{p - 1}, got {cross_shift}")
    kinds = np.repeat(np.arange(2 if cross_shift else 1), shift_values.size)
    shift_values = np.tile(shift_values, 2 if cross_shift else 1)
    check_rows("the input sequences", shift_values.size**2 * p, 3)
    context, anchors = numbers(0, p - 1), numbers(p, p + shift_values.size - 1)
    X = product_grid(anchors, anchors, context)
    a1, a2 = X[:, 0] - p, X[:, 1] - p
    y = (shift_values[a1] + shift_values[a2] + X[:, 2] + cross_shift * (kinds[a1] != kinds[a2])) % p
    meta = {"groups": {"context": context, "anchors": anchors}, "shifts": shift_values, "kinds": kinds}
    tokens = anchors if analysed == "anchors" else np.concatenate([context, anchors])
    return Dataset(X=X, y=y, vocab_size=p + shift_values.size, tokens=tokens, meta=meta)


# --------------------------------------------------------------------------------------------
# SPEC §9 anchor functions: the composite task
# --------------------------------------------------------------------------------------------


@register("composite")
def composite(key_lo: int = 20, key_hi: int = 99, noise_lo: int = 20, noise_hi: int = 99, seq_len: int = 9,
              anchors: tuple = (1, 2, 3, 4), shifts: tuple = (5, 1, -2, -8), special_pair: tuple = (3, 4),
              special_shift: int = -6, heldout_pair: tuple = (4, 3), residue_modulus: int = 5,
              residue_value: int = 0, n_samples: int = 20000, n_eval: int = 2000, seed: int = 0) -> Dataset:
    """Anchor-function composite task: key x shifted by two anchors, with held-out pair and residue rule (SPEC §9).

    Parameters:
        key_lo, key_hi: key ids ``key_lo..key_hi`` (``0 <= lo <= hi``).
        noise_lo, noise_hi: noise ids (by default the key range: keys look like noise and are
            recognised only by their place before the anchors).
        seq_len: sequence length, ``>= 3``.
        anchors: the anchor ids (distinct, disjoint from keys and noise).
        shifts: the shift ``s(a)`` of each anchor, same length as ``anchors``.
        special_pair: ordered anchor pair whose label is ``x + special_shift`` instead of the sum.
        special_shift: the shift of ``special_pair``.
        heldout_pair: ordered anchor pair that never appears in training (differs from
            ``special_pair``).
        residue_modulus, residue_value: samples with ``(x + p) % residue_modulus ==
            residue_value`` (key ``x`` at position ``p``) are held out of training and form the
            in-distribution test set; ``residue_modulus = 0`` disables the rule, otherwise
            ``0 <= residue_value < residue_modulus`` and the rule must hold out some, but not
            every, (key, position).
        n_samples: training samples (after the hold-outs), ``>= 1``.
        n_eval: samples of each evaluation set, ``>= 1``.
        seed: seed of the draws.

    Token ids: keys, noise and anchors as given; labels are ids ``x + shift``, all required to be
    ``>= 0``. ``vocab_size`` = one more than the largest key, noise, anchor or label id (any pair's
    label, including both answers for the held-out pair). ``tokens`` = keys in numeric order;
    ``meta["groups"] = {"anchors", "keys", "noise"}``.

    Label: ``y = x + s(a1) + s(a2)``, except ``(a1, a2) = special_pair`` → ``x + special_shift``.

    Samples: the key position ``p`` is uniform in ``0..seq_len-3``, the anchors sit at ``p+1, p+2``,
    every other position is noise (uniform with replacement). Training (``X, y``): ``n_samples``
    draws with ``(x, p)`` uniform over the combinations the residue rule keeps and ``(a1, a2)``
    uniform over the ordered anchor pairs other than ``heldout_pair``. ``meta["eval"]``:
    ``"heldout_pair"``: ``{"X", "y_inferential" (x + s(a1) + s(a2)), "y_symmetric" (x +
    special_shift)}`` with ``(x, p)`` uniform over all combinations; ``"residue_test"``: ``{"X",
    "y"}`` with ``(x, p)`` uniform over the held-out residue combinations and training pairs (empty
    when the rule is off). All three sets come from one generator seeded with ``seed``, drawn in
    the order training, held-out pair, residue test. ``meta["key_position"]`` is ``p`` per training
    sample (and ``"key_position"`` in each eval set).
    """
    keys = check_id_range("key_lo", key_lo, "key_hi", key_hi)
    noise = check_id_range("noise_lo", noise_lo, "noise_hi", noise_hi)
    seq_len = check_int("seq_len", seq_len, 3)
    rule, heldout = _check_composite_anchors(anchors, shifts, special_pair, special_shift, heldout_pair, keys, noise)
    residue_modulus = check_int("residue_modulus", residue_modulus, 0)
    if residue_modulus:
        residue_value = check_int("residue_value", residue_value, 0, residue_modulus - 1)
    n_samples = check_int("n_samples", n_samples, 1)
    n_eval = check_int("n_eval", n_eval, 1)
    seed = check_int("seed", seed, 0)
    check_rows("the ordered anchor pairs", rule.anchors.size ** 2, 2)
    check_rows("the (key, position) combinations", keys.size * (seq_len - 2), 2)
    check_rows("the n_samples input sequences of length seq_len", n_samples, seq_len)
    check_rows("the n_eval input sequences of length seq_len", n_eval, seq_len)

    pairs = product_grid(rule.anchors, rule.anchors)
    train_pairs = pairs[~_row_mask(pairs, np.array([heldout]))]
    combos = product_grid(keys, numbers(0, seq_len - 3))
    in_residue = _residue_mask(combos, residue_modulus, residue_value)
    vocab_size = _composite_vocab_size(rule, pairs, keys, noise)

    rng = np.random.default_rng(seed)
    X, x, pos, pr = _draw_key_pair_samples(rng, n_samples, combos[~in_residue], train_pairs, noise, seq_len)
    evals = _composite_eval_sets(rng, n_eval, combos, in_residue, train_pairs, heldout, rule, noise, seq_len)
    meta = {
        "groups": {"anchors": rule.anchors, "keys": keys, "noise": noise},
        "shifts": rule.shifts,
        "key_position": pos,
        "eval": evals,
    }
    return Dataset(X=X, y=rule.labels(x, pr), vocab_size=vocab_size, tokens=keys, meta=meta)


class _PairShifts:
    """The label rule of :func:`composite`: ``y = x + s(a1) + s(a2)``, except ``x + special_shift`` for the
    special pair.

    Attributes:
        anchors: (n_anchors,) the anchor ids, in the given order.
        shifts: anchor id -> its shift ``s(a)``.
        special_shift: the shift of the special pair.
    """

    def __init__(self, anchors: np.ndarray, shifts: tuple[int, ...], special: tuple[int, ...],
                 special_shift: int) -> None:
        self.anchors, self.special, self.special_shift = anchors, special, special_shift
        self.shifts = dict(zip(anchors.tolist(), shifts))
        # Shift of each anchor id, looked up by sorted position (the ids may be large).
        by_id = np.argsort(anchors)
        self._sorted_ids, self._sorted_shifts = anchors[by_id], np.array(shifts, dtype=np.int64)[by_id]

    def summed(self, x: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        """``x + s(a1) + s(a2)`` for keys ``x`` (n,) and ordered anchor pairs ``pairs`` (n, 2)."""
        return x + self._shift_of(pairs[:, 0]) + self._shift_of(pairs[:, 1])

    def labels(self, x: np.ndarray, pairs: np.ndarray) -> np.ndarray:
        """The labels of keys ``x`` (n,) with ordered anchor pairs ``pairs`` (n, 2)."""
        is_special = (pairs[:, 0] == self.special[0]) & (pairs[:, 1] == self.special[1])
        return np.where(is_special, x + self.special_shift, self.summed(x, pairs))

    def _shift_of(self, ids: np.ndarray) -> np.ndarray:
        """The shift ``s(a)`` of each anchor id in ``ids``."""
        return self._sorted_shifts[np.searchsorted(self._sorted_ids, ids)]


def _check_composite_anchors(anchors: object, shifts: object, special_pair: object, special_shift: object,
                             heldout_pair: object, keys: np.ndarray,
                             noise: np.ndarray) -> tuple[_PairShifts, tuple[int, ...]]:
    """Check the anchor parameters of :func:`composite` (anchors disjoint from ``keys`` and ``noise``);
    return the label rule and the held-out pair."""
    anchor_ids = _check_tuple("anchors", anchors)
    if not anchor_ids or min(anchor_ids) < 0 or len(set(anchor_ids)) != len(anchor_ids):
        raise InputError(f"parameter 'anchors' must be distinct non-negative ids, got {anchors!r}")
    anchor_arr = np.array(anchor_ids, dtype=np.int64)
    check_disjoint({"anchors": anchor_arr, "keys (key_lo..key_hi)": keys})
    check_disjoint({"anchors": anchor_arr, "noise (noise_lo..noise_hi)": noise})
    shift_vals = _check_tuple("shifts", shifts, len(anchor_ids), why=f"one per entry of 'anchors', {anchors!r}")
    special = _check_tuple("special_pair", special_pair, 2, anchor_arr, allowed_by="the entries of 'anchors'")
    special_shift = check_int("special_shift", special_shift)
    heldout = _check_tuple("heldout_pair", heldout_pair, 2, anchor_arr, allowed_by="the entries of 'anchors'")
    if heldout == special:
        raise InputError(f"parameter 'heldout_pair' must differ from special_pair, both are {heldout!r}")
    return _PairShifts(anchor_arr, shift_vals, special, special_shift), heldout


def _residue_mask(combos: np.ndarray, modulus: int, value: int) -> np.ndarray:
    """Which (key, position) rows of ``combos`` the residue rule of :func:`composite` holds out (none for
    ``modulus = 0``); InputError if it holds out every row, or none while it is on."""
    in_residue = ((combos[:, 0] + combos[:, 1]) % modulus == value) if modulus \
        else np.zeros(combos.shape[0], dtype=bool)
    if in_residue.all():
        raise InputError("the residue rule (residue_modulus, residue_value) holds out every (key, position); "
                         "no training samples remain")
    if modulus and not in_residue.any():
        raise InputError(f"the residue rule (residue_modulus={modulus}, residue_value={value}) "
                         "holds out no (key, position): the residue test set would be empty; "
                         "use residue_modulus=0 to disable the rule")
    return in_residue


def _composite_vocab_size(rule: _PairShifts, pairs: np.ndarray, keys: np.ndarray, noise: np.ndarray) -> int:
    """One more than the largest key, noise, anchor or label id of :func:`composite`; InputError if a label
    would be negative."""
    # Label shifts of every ordered pair; covers both held-out answers (the held-out pair's sum and
    # special_shift, the special pair's label).
    all_shifts = rule.labels(np.zeros(len(pairs), dtype=np.int64), pairs)
    if keys[0] + all_shifts.min() < 0:
        raise InputError(f"labels would be negative (key {int(keys[0])} + shift {int(all_shifts.min())}); "
                         "raise key_lo or change shifts / special_shift")
    return int(max(keys[-1] + all_shifts.max(), keys[-1], noise[-1], rule.anchors.max())) + 1


def _draw_key_pair_samples(rng: np.random.Generator, n: int, combo_rows: np.ndarray, pair_rows: np.ndarray,
                           noise: np.ndarray, seq_len: int) -> tuple[np.ndarray, ...]:
    """``n`` sequences with (key, position) drawn from ``combo_rows`` and the anchor pair from ``pair_rows``:
    (X, keys, positions, pairs)."""
    kp = _draw_rows(rng, combo_rows, n)
    pr = _draw_rows(rng, pair_rows, n)
    return _key_anchor_sequences(rng, kp[:, 0], kp[:, 1], pr, noise, seq_len), kp[:, 0], kp[:, 1], pr


def _composite_eval_sets(rng: np.random.Generator, n: int, combos: np.ndarray, in_residue: np.ndarray,
                         train_pairs: np.ndarray, heldout: tuple[int, ...], rule: _PairShifts, noise: np.ndarray,
                         seq_len: int) -> dict:
    """``meta["eval"]`` of :func:`composite`, drawn in this order: the held-out pair set, then the residue
    test set (empty when the residue rule holds out nothing, i.e. is off)."""
    Xh, xh, posh, prh = _draw_key_pair_samples(rng, n, combos, np.array([heldout]), noise, seq_len)
    heldout_eval = {"X": Xh, "y_inferential": rule.summed(xh, prh), "y_symmetric": xh + rule.special_shift,
                    "key_position": posh}
    if in_residue.any():
        Xr, xr, posr, prr = _draw_key_pair_samples(rng, n, combos[in_residue], train_pairs, noise, seq_len)
        residue_eval = {"X": Xr, "y": rule.labels(xr, prr), "key_position": posr}
    else:
        residue_eval = _empty_eval(seq_len)
    return {"heldout_pair": heldout_eval, "residue_test": residue_eval}


# --------------------------------------------------------------------------------------------
# SPEC §9 reasoning vs memory anchors (arXiv 2502.04375)
# --------------------------------------------------------------------------------------------


@register("reason_memory")
def reason_memory(key_lo: int = 21, key_hi: int = 120, memory_lo: int = 1, memory_hi: int = 10,
                  reasoning_lo: int = 11, reasoning_hi: int = 20, q: int = 2, seq_len: int = 9,
                  p_reasoning: float = 0.5, heldout: tuple = ((11, 13), (13, 11)), n_samples: int = 20000,
                  n_eval: int = 2000, seed: int = 0) -> Dataset:
    """Reasoning anchors (label = key + Σ anchors) versus memory anchors (fixed random labels) (SPEC §9).

    Parameters:
        key_lo, key_hi: key ids ``key_lo..key_hi``; noise tokens are drawn from the same range.
        memory_lo, memory_hi: memory anchor ids.
        reasoning_lo, reasoning_hi: reasoning anchor ids. Keys, memory and reasoning anchors must be
            disjoint id ranges.
        q: anchors per sequence, ``>= 1``.
        seq_len: sequence length, ``>= q + 1``.
        p_reasoning: probability that a training sample uses reasoning anchors, in ``[0, 1]``.
        heldout: ordered reasoning-anchor tuples (each of ``q`` reasoning ids) that never appear in
            training; not all reasoning tuples may be held out.
        n_samples: training samples, ``>= 1``.
        n_eval: samples of the held-out evaluation set, ``>= 1``.
        seed: seed of the draws.

    Token ids: keys and noise ``key_lo..key_hi``; memory anchors; reasoning anchors; an anchor's
    id is its value. Labels are ids ``key_lo..key_hi + q·reasoning_hi``. ``vocab_size`` = one more
    than the largest id or label. ``tokens`` = memory anchors then reasoning anchors (numeric
    order for the defaults); ``meta["groups"] = {"keys", "memory_anchors", "reasoning_anchors"}``.

    Label: reasoning sample: ``y = key + Σ anchor ids``. Memory sample: ``y = table[key, tuple]``,
    where each (key, ordered tuple of ``q`` memory anchors) gets a fixed random label drawn once,
    uniformly from ``key_lo..key_hi + q·reasoning_hi`` (our reading of "each (key, anchor) gets a
    fixed random label" for ``q`` anchors). ``meta["memory_table"]`` has shape
    ``(n_keys, n_memory**q)``, columns indexing the memory tuples lexicographically.

    Samples: key position ``p`` uniform in ``0..seq_len-q-1``, the ``q`` anchors at ``p+1..p+q``,
    all of one kind (reasoning with probability ``p_reasoning``), uniformly over that kind's
    allowed ordered tuples; the other positions are noise (uniform with replacement from the key
    range). One generator seeded with ``seed`` draws, in order, the memory table, the training set
    and ``meta["eval"]["heldout_reasoning"] = {"X", "y"}`` (``n_eval`` samples with a held-out
    tuple, uniform over them; empty if ``heldout`` is empty). ``meta["is_reasoning"]`` and
    ``meta["key_position"]`` describe each training sample.
    """
    keys = check_id_range("key_lo", key_lo, "key_hi", key_hi)
    memory = check_id_range("memory_lo", memory_lo, "memory_hi", memory_hi)
    reasoning = check_id_range("reasoning_lo", reasoning_lo, "reasoning_hi", reasoning_hi)
    check_disjoint({"keys (key_lo..key_hi)": keys, "memory anchors (memory_lo..memory_hi)": memory,
                    "reasoning anchors (reasoning_lo..reasoning_hi)": reasoning})
    q = check_int("q", q, 1)
    seq_len = check_int("seq_len", seq_len, q + 1)
    p_reasoning = check_float("p_reasoning", p_reasoning, 0.0, 1.0)
    held = _check_heldout_tuples(heldout, q, reasoning)
    n_samples = check_int("n_samples", n_samples, 1)
    n_eval = check_int("n_eval", n_eval, 1)
    seed = check_int("seed", seed, 0)
    check_rows("the n_samples input sequences of length seq_len", n_samples, seq_len)
    check_rows("the n_eval input sequences of length seq_len", n_eval, seq_len)
    _check_table_sizes(keys.size, q, {"memory": memory.size, "reasoning": reasoning.size})

    max_label = int(keys[-1]) + q * int(reasoning[-1])
    memory_tuples = product_grid(*([memory] * q))
    reasoning_tuples = _training_reasoning_tuples(reasoning, q, held)

    rng = np.random.default_rng(seed)
    table = rng.integers(int(keys[0]), max_label + 1, size=(keys.size, memory_tuples.shape[0]))
    positions = numbers(0, seq_len - q - 1)
    X, y, is_reasoning, pos = _draw_reason_memory(rng, n_samples, p_reasoning, keys, positions, reasoning_tuples,
                                                  memory_tuples, table, seq_len)
    meta = {
        "groups": {"keys": keys, "memory_anchors": memory, "reasoning_anchors": reasoning},
        "memory_table": table,
        "is_reasoning": is_reasoning,
        "key_position": pos,
        "eval": {"heldout_reasoning": _heldout_reasoning_eval(rng, n_eval, keys, positions, held, seq_len)},
    }
    vocab_size = max(max_label, int(memory[-1]), int(reasoning[-1])) + 1
    return Dataset(X=X, y=y, vocab_size=vocab_size, tokens=np.concatenate([memory, reasoning]), meta=meta)


def _check_heldout_tuples(heldout: object, q: int, reasoning: np.ndarray) -> np.ndarray:
    """The held-out tuples of :func:`reason_memory`, each ``q`` ids in ``reasoning``, as int64 (n_heldout, q)."""
    if not isinstance(heldout, (tuple, list)):
        raise InputError(f"parameter 'heldout' must be a tuple of anchor tuples, got {heldout!r}")
    return np.array([_check_tuple("heldout", t, q, reasoning, f"q={q}", "reasoning_lo..reasoning_hi") for t in heldout],
                    dtype=np.int64).reshape(-1, q)


def _check_table_sizes(n_keys: int, q: int, sizes: dict[str, int]) -> None:
    """InputError if ``n_keys`` keys times the ``size**q`` anchor tuples of a kind exceed ``MAX_TABLE``."""
    for name, size in sizes.items():
        # Compare in logs first: size**q may have billions of digits.
        if math.log2(n_keys) + q * math.log2(size) > math.log2(MAX_TABLE) + 1 or n_keys * size**q > MAX_TABLE:
            raise InputError(f"{name} anchor tuples: {n_keys} keys x {size}**{q} tuples exceed {MAX_TABLE} "
                             "table entries; lower q or the anchor ranges")


def _training_reasoning_tuples(reasoning: np.ndarray, q: int, held: np.ndarray) -> np.ndarray:
    """The ordered ``q``-tuples of reasoning anchors not in ``held``; InputError if none is left."""
    tuples = product_grid(*([reasoning] * q))
    tuples = tuples[~_row_mask(tuples, held)]
    if tuples.shape[0] == 0:
        raise InputError("parameter 'heldout' holds out every reasoning tuple; none is left for training")
    return tuples


def _draw_keys_positions(rng: np.random.Generator, keys: np.ndarray, positions: np.ndarray,
                         n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` keys, then ``n`` key positions, each drawn uniformly with replacement."""
    return _draw_rows(rng, keys[:, None], n)[:, 0], _draw_rows(rng, positions[:, None], n)[:, 0]


def _draw_reason_memory(rng: np.random.Generator, n: int, p_reasoning: float, keys: np.ndarray,
                        positions: np.ndarray, reasoning_tuples: np.ndarray, memory_tuples: np.ndarray,
                        table: np.ndarray, seq_len: int) -> tuple[np.ndarray, ...]:
    """The ``n`` training samples of :func:`reason_memory`: (X, y, is_reasoning, key positions)."""
    is_reasoning = rng.random(n) < p_reasoning
    key, pos = _draw_keys_positions(rng, keys, positions, n)
    memory_idx = rng.integers(0, memory_tuples.shape[0], size=n)
    tuples = np.where(is_reasoning[:, None], _draw_rows(rng, reasoning_tuples, n), memory_tuples[memory_idx])
    X = _key_anchor_sequences(rng, key, pos, tuples, keys, seq_len)
    y = np.where(is_reasoning, key + tuples.sum(axis=1), table[key - keys[0], memory_idx])
    return X, y, is_reasoning, pos


def _heldout_reasoning_eval(rng: np.random.Generator, n: int, keys: np.ndarray, positions: np.ndarray,
                            held: np.ndarray, seq_len: int) -> dict[str, np.ndarray]:
    """``n`` evaluation samples of :func:`reason_memory` whose anchors are held-out tuples (uniform over
    ``held``); empty if ``held`` is."""
    if not held.shape[0]:
        return _empty_eval(seq_len)
    key, pos = _draw_keys_positions(rng, keys, positions, n)
    tuples = _draw_rows(rng, held, n)
    return {"X": _key_anchor_sequences(rng, key, pos, tuples, keys, seq_len), "y": key + tuples.sum(axis=1),
            "key_position": pos}

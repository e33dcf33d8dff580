"""The scores of word-group structure and their permutation null (SPEC §7, "Corpus semantics"):
``ordered`` groups by ``|Spearman(PC1, order)|``, ``cyclic`` groups by the cycle neighbours recovered
in the PC1–PC2 plane, categories by the cosine silhouette; chance from the same score with the order
or the labels permuted. :mod:`ctxstair.semantics.structure` applies them to signatures and embeddings.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial.distance import pdist, squareform

from ctxstair.errors import InputError

#: The number each kind of group is scored by (the key ``measure`` of its result).
GROUP_MEASURES = {"ordered": "|Spearman(PC1, order)|", "cyclic": "cycle neighbours recovered",
            "category": "silhouette (cosine)"}
#: What each kind of group is expected to show (SPEC §7), for the report.


# --- scores and their permutation null ----------------------------------------------------------


def score_groups(vectors: dict[str, np.ndarray], used: dict[str, list[str]], kinds: dict[str, str],
                  keep_geometry: bool) -> dict:
    """Score every group from the vectors of its used words (in listed order).

    Returns {``groups``: name -> {``value``, ``words``, + with ``keep_geometry``: ``pca``,
    ``explained`` and the private ``_coords`` (n, 2)}, ``categories``: {``value``,
    ``silhouette``, ``words``, ``labels``, ``pca``, ``explained``, ``_D``}}; private keys (``_``)
    feed :func:`add_nulls` and are removed there.
    """
    groups: dict = {}
    for name, words in used.items():
        entry: dict = {"value": None, "words": list(words)}
        if kinds[name] != "category" and len(words) >= 3:
            coords, explained = _pca2(np.stack([vectors[w] for w in words]))
            order = np.arange(len(words))
            entry["value"] = float(ordered_score(coords[:, 0], order) if kinds[name] == "ordered"
                                   else cyclic_score(coords, order))
            if keep_geometry:
                entry.update(pca=coords.tolist(), explained=explained.tolist(), _coords=coords)
        groups[name] = entry
    names = [name for name, words in used.items() if kinds[name] == "category" and len(words) >= 2]
    words = [w for name in names for w in used[name]]
    labels = [name for name in names for _ in used[name]]
    categories: dict = {"value": None, "silhouette": None, "words": words, "labels": labels}
    if len(names) >= 2:
        X = np.stack([vectors[w] for w in words])
        D = squareform(pdist(X, metric="cosine"))
        overall, per_category = category_scores(D, np.array(labels), names)
        for name, value in zip(names, per_category):
            groups[name]["value"] = _finite(value)
        categories.update(value=_finite(overall), silhouette=_finite(overall))
        if keep_geometry:
            coords, explained = _pca2(X)
            categories.update(pca=coords.tolist(), explained=explained.tolist(), _D=D, _names=names)
    return {"groups": groups, "categories": categories}


def add_nulls(point: dict, kinds: dict[str, str], n_permutations: int, rng: np.random.Generator) -> None:
    """Add ``chance`` and ``p_value`` (and ``chance_closed_form`` for cycles) to every scored
    group of :func:`score_groups`'s result, in place, from ``n_permutations`` random listings
    (ordered, cyclic) or labellings (categories); drop the private keys."""
    for name, entry in point["groups"].items():
        entry.update(chance=None, p_value=None)
        coords = entry.pop("_coords", None)
        if kinds[name] == "cyclic" and coords is not None:
            entry["chance_closed_form"] = min(1.0, 2 / (len(coords) - 1))
        if coords is None or not n_permutations:
            continue
        orders = _permutations(len(coords), n_permutations, rng)
        null = ordered_score(coords[:, 0], orders) if kinds[name] == "ordered" else cyclic_score(coords, orders)
        entry.update(permutation_test(entry["value"], null))
    categories = point["categories"]
    categories.update(chance=None, p_value=None)
    D, names = categories.pop("_D", None), categories.pop("_names", None)
    if D is None or not n_permutations:
        return
    labels = np.array(categories["labels"])
    shuffled = _permutations(len(labels), n_permutations, rng)
    null = [category_scores(D, labels[order], names) for order in shuffled]
    categories.update(permutation_test(categories["value"], np.array([overall for overall, _ in null])))
    per_category = np.array([values for _, values in null])  # (n_permutations, categories)
    for i, name in enumerate(names):
        point["groups"][name].update(permutation_test(point["groups"][name]["value"], per_category[:, i]))


def _permutations(n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """(count, n) independent uniformly random permutations of 0..n−1."""
    return rng.permuted(np.broadcast_to(np.arange(n), (count, n)), axis=1)


def permutation_test(observed: float | None, null: np.ndarray) -> dict:
    """Chance level and one-sided p-value of a score against its permutation null.

    Args:
        observed: the score (None: undefined).
        null: (m,) scores of random permutations; NaN entries (undefined) are dropped.

    Returns:
        {``chance``: the null mean, ``p_value``: ``(1 + #{null ≥ observed}) / (1 + m)``} (a
        1e-12 tolerance counts ties as ≥); both None when the score is undefined.
    """
    null = np.asarray(null, dtype=np.float64)
    null = null[np.isfinite(null)]
    if observed is None or null.size == 0:
        return {"chance": None, "p_value": None}
    p = (1 + np.count_nonzero(null >= observed - 1e-12)) / (1 + null.size)
    return {"chance": float(null.mean()), "p_value": float(p)}


def ordered_score(pc1: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``|Spearman(pc1, order)|`` for one listing or many.

    Args:
        pc1: (n,) the words' first principal coordinates, in listed order.
        order: (..., n) the rank each word gets: ``arange(n)`` for the listed order, a
            permutation of it for the null.

    Returns:
        (...,) float64: |Pearson correlation| of the ranks of ``pc1`` (ties averaged) with
        ``order`` — Spearman's ρ since ``order`` has no ties. 0 when ``pc1`` is constant.
    """
    from scipy.stats import rankdata

    ranks = rankdata(pc1)
    ranks = ranks - ranks.mean()
    order = np.asarray(order, dtype=np.float64)
    centred = order - order.mean(axis=-1, keepdims=True)
    denominator = np.sqrt((ranks**2).sum() * (centred**2).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.abs(centred @ ranks) / denominator
    return np.where(denominator > 0, rho, 0.0)


def cyclic_score(coords: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Fraction of listed neighbours (last → first included) that are neighbours in the angular
    order of the points around their centroid, for one listing or many.

    Args:
        coords: (n, 2) PCA coordinates (centred), in listed order.
        order: (..., n) a listing: ``order[..., i]`` is the word at place i of the cycle
            (``arange(n)``: as listed).

    Returns:
        (...,) float64 in [0, 1]; a random listing scores ``2 / (n − 1)`` on average (n ≥ 3).
    """
    n = len(coords)
    position = np.empty(n, dtype=np.int64)
    position[np.argsort(np.arctan2(coords[:, 1], coords[:, 0]), kind="stable")] = np.arange(n)
    on_ring = position[np.asarray(order)]
    gap = (on_ring - np.roll(on_ring, -1, axis=-1)) % n  # place i vs place i+1 (mod n) on the ring
    return np.mean((gap == 1) | (gap == n - 1), axis=-1)


def category_scores(D: np.ndarray, labels: np.ndarray, names: list[str]) -> tuple[float, np.ndarray]:
    """Mean silhouette overall and of each category's members.

    Args:
        D: (n, n) distances; labels: (n,) category of each word; names: the categories, in order.

    Returns:
        (overall, (len(names),) per-category means); NaN for a category without members.
    """
    s = silhouette_samples(D, labels)
    per_category = np.array([s[labels == name].mean() if np.any(labels == name) else np.nan for name in names])
    return float(s.mean()), per_category


def silhouette_samples(D: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Silhouette ``s_i = (b_i − a_i) / max(a_i, b_i)`` of each sample from a distance matrix.

    Args:
        D: (n, n) symmetric distances with a zero diagonal.
        labels: (n,) cluster labels, at least two distinct.

    Returns:
        (n,) float64: ``a_i`` is the mean distance to the other members of i's cluster, ``b_i``
        the smallest mean distance to the members of another cluster; a sample alone in its
        cluster scores 0 (the usual convention).
    """
    names, index = np.unique(labels, return_inverse=True)
    if names.size < 2:
        raise InputError("a silhouette needs at least two distinct labels")
    onehot = np.eye(names.size)[index]                      # (n, C)
    sizes = onehot.sum(axis=0)
    sums = D @ onehot                                       # (n, C): total distance to each cluster
    own = np.arange(len(index)), index
    others = np.where(onehot > 0, np.inf, sums / sizes)
    b = others.min(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        a = sums[own] / (sizes[index] - 1)
        s = (b - a) / np.maximum(a, b)
    return np.where((sizes[index] > 1) & np.isfinite(s), s, 0.0)


def _pca2(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PCA of the rows of ``X`` (n, F) on two components, as
    :func:`~ctxstair.alignment.pca.pca` (centred rows; each component's sign fixed so that its
    largest-magnitude loading is positive), computed from the n × n Gram matrix of the centred
    rows: much faster when F ≫ n (a signature has a column per next token; every bootstrap
    replicate repeats this). The corpus and its replicates go through this one routine, so
    identical counts give identical scores even where components are degenerate.

    Returns:
        coords (n, 2) and the fraction of variance of each component (2,).
    """
    centred = X - X.mean(axis=0)
    values, vectors = np.linalg.eigh(centred @ centred.T)
    top = np.argsort(values, kind="stable")[::-1][:2]
    values = np.where(values > 1e-12 * max(values.max(), 0.0), values, 0.0)  # rounding noise of a null direction
    scale = np.sqrt(values[top])
    coords = vectors[:, top] * scale
    loadings = (centred.T @ vectors[:, top]).T  # (2, F), each ∝ its component's direction
    signs = np.sign(loadings[np.arange(2), np.abs(loadings).argmax(axis=1)])
    coords = coords * np.where(signs == 0, 1.0, signs)
    total = values.sum()
    return coords, (scale**2 / total if total > 0 else np.zeros(2))


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None

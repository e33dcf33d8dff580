"""Semantic structure that a corpus's next-token statistics already carry (SPEC §7, "Corpus semantics").

For word groups with a known structure (:data:`~ctxstair.lm.corpus.SYNTHETIC_GROUPS` by default)
:func:`group_structure` takes each word's next-token signature ``φ^{y;nt}_w(ν) = P(x_{s+1} = ν | x_s = w)``
over the whole corpus and scores how well the structure shows:

* ``ordered`` groups (numbers): ``|Spearman|`` between each word's coordinate on the first principal
  component of the group's signatures and its listed order (1 = the path is in order);
* ``cyclic`` groups (weekdays, months): the fraction of cyclically adjacent pairs (last → first
  included) that are neighbours in the angular order around the centroid in the PC1–PC2 plane
  (1 = the cycle is recovered; a random arrangement scores ``2 / (n − 1)`` on average);
* ``category`` groups (colours, family roles, ...): the silhouette of the category labels over the
  signatures of all category words, with cosine distance (overall and per category; > 0 means
  words are closer to their own category than to the nearest other one).

A word counts when it is a single token, as written or capitalised ("may", "May": real text
capitalises names of days, months and countries; both spellings' pairs are pooled), and occurs at
least ``min_count`` times; other words are reported as missing with the reason. PCA is of the raw
signatures (probability rows), as SPEC §7 states it.
:func:`ctxstair.report.semantics_figures.semantics_figure` draws the PCA pictures;
``ctxstair semantics CORPUS`` writes both.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.spatial.distance import pdist, squareform
from scipy.stats import spearmanr

from ctxstair.alignment.pca import pca
from ctxstair.errors import InputError
from ctxstair.lm.corpus import SYNTHETIC_GROUPS, WordGroup
from ctxstair.lm.tokenizer import TextTokenizer
from ctxstair.signatures import next_token_signature

#: The number each kind of group is scored by (the key ``measure`` of its result).
MEASURES = {"ordered": "|Spearman(PC1, order)|", "cyclic": "cycle neighbours recovered",
            "category": "silhouette (cosine)"}


def group_structure(text: str, tokenizer: TextTokenizer, groups: dict[str, WordGroup] = SYNTHETIC_GROUPS,
                    min_count: int = 5) -> dict:
    """Score the structure of each word group in the next-token signatures of ``text``.

    Args:
        text: the corpus, encoded whole with ``tokenizer``; every adjacent token pair counts.
        groups: name -> :class:`~ctxstair.lm.corpus.WordGroup`.
        min_count: a word whose tokens occur fewer times (with a next token) is left out.

    Returns:
        A JSON-ready dict: ``n_tokens``, ``vocab_size``; ``groups``: name -> {``kind``,
        ``measure``, ``value`` (None when undefined: fewer than 3 words in an ordered or cyclic
        group, fewer than 2 in a category, or fewer than 2 such categories), ``words`` (those
        used), ``counts``, ``missing`` (word -> reason), and for ordered / cyclic groups with 3 or
        more words ``pca`` (n, 2) and ``explained`` (2,), plus ``p_value`` (of the rank
        correlation) or ``chance`` (the random-arrangement level)}; ``categories``:
        {``silhouette``, ``words``, ``labels``, ``pca``, ``explained``} over the words of all
        categories with 2 or more words.
    """
    if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
        raise InputError(f"min_count must be a positive integer, got {min_count!r}")
    for name, group in groups.items():
        if group.kind not in MEASURES:
            raise InputError(f"group {name!r} has kind {group.kind!r}; choose from {', '.join(MEASURES)}")
    ids = tokenizer.encode(text)
    if ids.size < 2:
        raise InputError("the corpus has fewer than 2 tokens: no next-token pairs to count")
    V = tokenizer.vocab_size
    counts = np.bincount(ids[:-1], minlength=V)  # occurrences that have a next token

    found: dict[str, dict[str, list[int]]] = {}  # group -> word -> its tokens
    missing: dict[str, dict[str, str]] = {}
    for name, group in groups.items():
        found[name], missing[name] = {}, {}
        for word in group.words:
            tokens = _word_tokens(tokenizer, word)
            total = int(counts[tokens].sum()) if tokens else 0
            if not tokens:
                missing[name][word] = "not a single token"
            elif total < min_count:
                missing[name][word] = f"occurs {total} times (< {min_count})"
            else:
                found[name][word] = tokens

    all_tokens = np.unique([t for words in found.values() for tokens in words.values() for t in tokens])
    signatures = {}
    if all_tokens.size:
        # (k, V); the corpus is one window
        phi = next_token_signature(ids[None, :], V, tokens=all_tokens.astype(np.int64))
        row = {int(t): i for i, t in enumerate(all_tokens)}
        for words in found.values():
            for word, tokens in words.items():
                # A word spelled by several tokens (" may", " May") pools their pairs: weight by counts.
                weights = counts[tokens].astype(np.float64)
                signatures[word] = weights @ phi[[row[t] for t in tokens]] / weights.sum()

    result: dict = {"n_tokens": int(ids.size), "vocab_size": int(V), "groups": {}}
    for name, group in groups.items():
        words = list(found[name])
        entry = {"kind": group.kind, "measure": MEASURES[group.kind], "value": None, "words": words,
                 "counts": [int(counts[found[name][w]].sum()) for w in words], "missing": missing[name]}
        if group.kind != "category" and len(words) >= 3:
            coords, explained = pca(np.stack([signatures[w] for w in words]), 2)
            entry.update(pca=coords.tolist(), explained=explained.tolist())
            if group.kind == "ordered":
                rho = spearmanr(coords[:, 0], np.arange(len(words)))
                entry.update(value=_finite(abs(rho.statistic)), p_value=_finite(rho.pvalue))
            else:
                entry.update(value=_cycle_recovered(coords), chance=min(1.0, 2 / (len(words) - 1)))
        result["groups"][name] = entry
    result["categories"] = _categories(result["groups"], signatures)
    return result


def _word_tokens(tokenizer: TextTokenizer, word: str) -> list[int]:
    """The single tokens that spell ``word`` as written and capitalised ("may", "May"), each
    preferring the form with a leading space (see :meth:`TextTokenizer.word_token_id`)."""
    tokens = [tokenizer.word_token_id(spelling) for spelling in dict.fromkeys((word, word.capitalize()))]
    return list(dict.fromkeys(t for t in tokens if t is not None))


def _cycle_recovered(coords: np.ndarray) -> float:
    """Fraction of listed-order neighbours (last → first included) that are neighbours in the
    angular order of the points around their centroid (PCA coordinates are centred)."""
    n = len(coords)
    position = np.empty(n, dtype=np.int64)
    position[np.argsort(np.arctan2(coords[:, 1], coords[:, 0]))] = np.arange(n)
    gap = (position - np.roll(position, -1)) % n  # word i vs word i+1 (mod n) on the ring
    return float(np.mean((gap == 1) | (gap == n - 1)))


def _categories(groups: dict, signatures: dict[str, np.ndarray]) -> dict:
    """Silhouette of all category words together (cosine distance); fills each category group's
    ``value`` with its own members' mean silhouette. A category with fewer than two words in the
    corpus shows no cluster and is left out."""
    names = [name for name, entry in groups.items() if entry["kind"] == "category" and len(entry["words"]) >= 2]
    words = [w for name in names for w in groups[name]["words"]]
    labels = [name for name in names for _ in groups[name]["words"]]
    summary = {"silhouette": None, "words": words, "labels": labels}
    if len(names) < 2:
        return summary
    X = np.stack([signatures[w] for w in words])
    s = silhouette_samples(squareform(pdist(X, metric="cosine")), np.array(labels))
    for name in names:
        groups[name]["value"] = _finite(s[np.array(labels) == name].mean())
    coords, explained = pca(X, 2)
    summary.update(silhouette=_finite(s.mean()), pca=coords.tolist(), explained=explained.tolist())
    return summary


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


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def summary_lines(result: dict) -> list[str]:
    """One line per group (its score, words used, chance level or p-value) and one for all
    categories together, as printed by ``ctxstair semantics``."""
    lines = []
    for name, entry in result["groups"].items():
        used, listed = len(entry["words"]), len(entry["words"]) + len(entry["missing"])
        extra = f", chance {entry['chance']:.2f}" if "chance" in entry else ""
        extra += f", p = {entry['p_value']:.2g}" if entry.get("p_value") is not None else ""
        lines.append(f"{name:12s} {entry['kind']:9s} {entry['measure']:27s} = {format_score(entry['value'])}"
                     f"  ({used}/{listed} words{extra})")
    categories = result["categories"]
    lines.append(f"{'categories':12s} {'all':9s} {MEASURES['category']:27s} = {format_score(categories['silhouette'])}"
                 f"  ({len(categories['words'])} words, {len(set(categories['labels']))} groups)")
    return lines


def format_score(value: float | None) -> str:
    """A score with three decimals, or ``n/a`` when it could not be measured."""
    return "  n/a" if value is None else f"{value:.3f}"

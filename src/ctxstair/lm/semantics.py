"""Semantic structure of word groups in a corpus's next-token statistics and in a model's input
embeddings, each against chance and with its uncertainty (SPEC §7, "Corpus semantics").

For word groups with a known structure (:data:`~ctxstair.lm.corpus.SYNTHETIC_GROUPS` by default)
:func:`group_structure` takes each word's next-token signature ``φ^{y;nt}_w(ν) = P(x_{s+1} = ν | x_s = w)``
over the whole corpus, and :func:`embedding_structure` a model's input-embedding row of each word,
and both score how well the structure shows:

* ``ordered`` groups (numbers): ``|Spearman|`` between each word's coordinate on the first principal
  component of the group's vectors and its listed order (1 = the path is in order);
* ``cyclic`` groups (weekdays, months): the fraction of cyclically adjacent pairs (last → first
  included) that are neighbours in the angular order around the centroid in the PC1–PC2 plane
  (1 = the cycle is recovered);
* ``category`` groups (colours, family roles, ...): the silhouette of the category labels over the
  vectors of all category words, with cosine distance (overall and per category; > 0 means
  words are closer to their own category than to the nearest other one).

**Chance** is computed, not assumed: a permutation null per group, the same score with the listed
order of the words (ordered, cyclic) or the category labels (categories) randomly permuted
(``n_permutations`` times, seeded). ``chance`` is the null mean, ``p_value`` the one-sided
``(1 + #{null ≥ observed}) / (1 + n_permutations)``. (For a cycle of n words the null mean is
``2 / (n − 1)``; for an ordered group it is ``E|ρ_s|`` of a random permutation, ≈ 0.19 for 20 words.)

**Uncertainty.** For signatures, a block bootstrap over the corpus (:func:`group_structure`); for
embeddings, which are fixed numbers, no confidence interval but a leave-one-word-out range
(:func:`embedding_structure`).

A word counts when it is a single token, as written or capitalised ("may", "May": real text
capitalises names of days, months and countries; both spellings are pooled), and, for
signatures, occurs at least ``min_count`` times; other words are reported as missing with the
reason. PCA is of the raw vectors (signature probability rows, embedding rows), as SPEC §7 states
it. :mod:`ctxstair.report.semantics_figures` draws the pictures; ``ctxstair semantics CORPUS
[--model SOURCE]`` writes them with ``semantics.json`` and ``report.md``.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
from scipy.spatial.distance import pdist, squareform

from ctxstair.errors import InputError
from ctxstair.lm.corpus import SYNTHETIC_GROUPS, WordGroup
from ctxstair.lm.tokenizer import TextTokenizer
from ctxstair.signatures.blocks import block_pair_counts

#: The number each kind of group is scored by (the key ``measure`` of its result).
MEASURES = {"ordered": "|Spearman(PC1, order)|", "cyclic": "cycle neighbours recovered",
            "category": "silhouette (cosine)"}
#: What each kind of group is expected to show (SPEC §7), for the report.
EXPECTATIONS = {"ordered": "a path in the listed order", "cyclic": "a cycle in the listed order",
                "category": "a cluster of its own"}


# --- signatures: the corpus -------------------------------------------------------------------


# long: half of it is the docstring, which says what the bootstrap resamples and why
def group_structure(text: str, tokenizer: TextTokenizer, groups: dict[str, WordGroup] = SYNTHETIC_GROUPS,
                    min_count: int = 5, *, n_permutations: int = 1000, bootstrap: int = 200,
                    block_tokens: int = 1000, seed: int = 0) -> dict:
    """Score the structure of each word group in the next-token signatures of ``text`` (SPEC §7),
    with a permutation null and a block-bootstrap confidence interval.

    **Bootstrap: what is resampled and why.** The encoded corpus is cut into blocks of
    ``block_tokens`` consecutive tokens; the pair ``(x_s, x_{s+1})`` belongs to the block of
    ``s``. A bootstrap corpus draws as many blocks, uniformly with replacement, and its counts are
    the sum of the drawn blocks' counts; the whole measurement — the ``min_count`` filter, the
    signatures, PCA, the score — is repeated on it. Blocks rather than single pairs are drawn
    because adjacent-token pairs are not independent: within a sentence, a verse or a passage
    (one about months, say) the pairs share a topic and follow one another, so resampling pairs
    would treat them as independent evidence and make the interval too narrow. The interval is
    the percentile 95 % interval of the replicates whose score is defined (``bootstrap.defined``
    says how many, ``bootstrap.mean`` gives their mean). The scores are not linear in the counts:
    sampling noise in a word's signature blurs an order or a cluster, so a resampled corpus
    tends to score lower than the corpus (and the corpus lower than unlimited text of its kind).
    Where this bias is large the point lies outside (mostly above) its percentile interval; the
    printout and the report flag it. Affordable: the pairs whose first token is a group word are counted once per
    block into a sparse (blocks × cells) matrix over the (word, next token) cells that occur; a
    replicate is one sparse product with the vector of block multiplicities — nothing is
    re-tokenised.

    Args:
        text: the corpus, encoded whole with ``tokenizer``; every adjacent token pair counts.
        groups: name -> :class:`~ctxstair.lm.corpus.WordGroup`.
        min_count: a word whose tokens occur fewer times (with a next token) is left out.
        n_permutations: draws of the permutation null per group (0: no null).
        bootstrap: B, the number of bootstrap corpora (0: no interval).
        block_tokens: tokens per bootstrap block.
        seed: seeds the permutations and the bootstrap (independent streams).

    Returns:
        A JSON-ready dict: ``n_tokens``, ``vocab_size``, ``null`` {``n_permutations``, ``seed``},
        ``bootstrap`` {``replicates``, ``block_tokens``, ``n_blocks``, ``seed``}; ``groups``:
        name -> {``kind``, ``measure``, ``value`` (None when undefined: fewer than 3 words in an
        ordered or cyclic group, fewer than 2 in a category, or fewer than 2 such categories),
        ``chance`` and ``p_value`` (None when undefined or without a null), ``ci`` ([low, high]
        or None), ``bootstrap`` {``replicates``, ``defined``, ``mean``}, ``words`` (those used), ``counts``,
        ``missing`` (word -> reason), for ordered / cyclic groups with 3 or more words ``pca``
        (n, 2) and ``explained`` (2,), for cyclic groups ``chance_closed_form`` = 2/(n−1)};
        ``categories``: the same score keys for the silhouette over the words of all categories
        with 2 or more words, with ``silhouette`` (= ``value``), ``words``, ``labels``, ``pca``,
        ``explained``.
    """
    _check_counts(min_count=min_count, n_permutations=n_permutations, bootstrap=bootstrap)
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1:
        raise InputError(f"block_tokens must be a positive integer, got {block_tokens!r}")
    _check_groups(groups)
    ids = tokenizer.encode(text)
    if ids.size < 2:
        raise InputError("the corpus has fewer than 2 tokens: no next-token pairs to count")
    V = tokenizer.vocab_size
    occurrences = np.bincount(ids[:-1], minlength=V)  # occurrences that have a next token
    found, missing = _find_words(tokenizer, groups, occurrences, min_count)
    rows = list(dict.fromkeys(w for words in found.values() for w in words))  # one row per word
    tokens_of = {w: tokens for words in found.values() for w, tokens in words.items()}
    counts = BlockBigramCounts.of_stream(ids, [tokens_of[w] for w in rows], block_tokens)
    corpus = {"n_tokens": int(ids.size), "vocab_size": int(V), "block_tokens": block_tokens}
    return _structure(counts, rows, found, missing, groups, corpus, min_count, n_permutations, bootstrap, seed)


def group_structure_from_stats(stats, tokenizer: TextTokenizer, groups: dict[str, WordGroup] = SYNTHETIC_GROUPS,
                               min_count: int = 5, *, n_permutations: int = 1000, bootstrap: int = 200,
                               seed: int = 0) -> dict:
    """:func:`group_structure` from a statistics directory (``ctxstair corpus count --count ...,groups``,
    a :class:`~ctxstair.corpus.CorpusStats` or its path) counted with ``tokenizer``: the pairs inside
    its windows and its blocks of positions (the blocks' size is the count's). Equal to
    :func:`group_structure` of the same tokens when the windows are the whole stream; shorter windows
    leave out the pairs that cross a window's end. Words of ``groups`` the count did not track are
    reported missing."""
    from ctxstair.corpus import CorpusStats

    _check_counts(min_count=min_count, n_permutations=n_permutations, bootstrap=bootstrap)
    _check_groups(groups)
    stats = stats if isinstance(stats, CorpusStats) else CorpusStats(stats)
    stats.require("groups")
    stats.check_tokenizer(tokenizer)
    counted = stats.manifest["groups"]
    found, missing = _find_words(tokenizer, groups, stats.array("has_next"), min_count)
    for name in groups:
        for word in [w for w in found[name] if w not in counted["words"]]:
            missing[name][word] = "not counted in the statistics"
            del found[name][word]
    rows = list(dict.fromkeys(w for words in found.values() for w in words))
    new_row = np.array([rows.index(w) if w in rows else -1 for w in counted["words"]], dtype=np.int64)
    block, row, nxt, count = (stats.array(f"groups.{name}") for name in ("block", "row", "next", "counts"))
    keep = new_row[row] >= 0
    N, L = stats.manifest["tokens"], counted["block_tokens"]
    counts = BlockBigramCounts(block[keep], new_row[row[keep]], nxt[keep], count[keep], len(rows),
                               math.ceil((N - 1) / L))
    corpus = {"n_tokens": int(N), "vocab_size": stats.vocab_size, "block_tokens": L}
    return _structure(counts, rows, found, missing, groups, corpus, min_count, n_permutations, bootstrap, seed)


def _structure(counts: BlockBigramCounts, rows: list[str], found: dict, missing: dict, groups: dict[str, WordGroup],
               corpus: dict, min_count: int, n_permutations: int, bootstrap: int, seed: int) -> dict:
    """The scores, nulls and bootstrap intervals of :func:`group_structure` from the block counts of
    ``rows`` (the words found)."""
    listed = {name: list(found[name]) for name in groups}
    kinds = {name: group.kind for name, group in groups.items()}

    def measure(cell_counts: np.ndarray, full: bool) -> dict:
        dense, totals = counts.dense(cell_counts)
        keep = totals >= min_count  # all True for the corpus itself
        vectors = {w: dense[i] / totals[i] for i, w in enumerate(rows) if keep[i]}
        used = {name: [w for w in words if w in vectors] for name, words in listed.items()}
        return _score_groups(vectors, used, kinds, keep_geometry=full)

    point = measure(counts.cells_total, full=True)
    seeds = np.random.SeedSequence(seed).spawn(2)
    _add_nulls(point, kinds, n_permutations, np.random.default_rng(seeds[0]))

    replicates: dict[str, list[float]] = {key: [] for key in [*groups, "categories"]}
    if bootstrap and counts.n_blocks >= 2:
        for cells in counts.resample(bootstrap, np.random.default_rng(seeds[1])):
            scores = measure(cells, full=False)
            for key in replicates:
                value = scores["categories" if key == "categories" else "groups"]
                value = value["value"] if key == "categories" else value[key]["value"]
                if value is not None:
                    replicates[key].append(value)

    result: dict = {"n_tokens": corpus["n_tokens"], "vocab_size": corpus["vocab_size"],
                    "null": {"n_permutations": n_permutations, "seed": seed},
                    "bootstrap": {"replicates": bootstrap, "block_tokens": corpus["block_tokens"],
                                  "n_blocks": counts.n_blocks, "seed": seed},
                    "groups": {}}
    total_of = dict(zip(rows, counts.totals(counts.cells_total).tolist()))
    for name, group in groups.items():
        entry = {"kind": group.kind, "measure": MEASURES[group.kind], **point["groups"][name],
                 "counts": [int(total_of[w]) for w in point["groups"][name]["words"]], "missing": missing[name]}
        entry.update(_interval(entry["value"], replicates[name], bootstrap))
        result["groups"][name] = entry
    result["categories"] = {**point["categories"], **_interval(point["categories"]["value"],
                                                               replicates["categories"], bootstrap)}
    return result


class BlockBigramCounts:
    """Counts of the pairs ``(x_s, x_{s+1})`` whose first token belongs to given rows (words),
    per block of consecutive positions, kept sparse. Built from a text's ids (:meth:`of_stream`) or
    from the counts of a statistics directory (:func:`group_structure_from_stats`).

    Args:
        block, row, nxt, count: (K,) int entries of :func:`~ctxstair.signatures.blocks.block_pair_counts`.
        n_rows: the rows (words).
        n_blocks: the blocks the bootstrap draws from (also those without a pair).

    Attributes:
        n_blocks: as given (``ceil((N − 1) / L)`` for N positions in blocks of L).
        columns: (C,) the next tokens that follow any row's token somewhere, ascending.
        cells: (K,) flat indices ``row · C + column`` of the (row, next token) cells that occur.
        by_block: sparse (n_blocks, K) counts of each cell in each block.
        cells_total: (K,) counts over the whole corpus.
    """

    def __init__(self, block: np.ndarray, row: np.ndarray, nxt: np.ndarray, count: np.ndarray, n_rows: int,
                 n_blocks: int):
        self.n_rows, self.n_blocks = n_rows, max(1, n_blocks)
        self.columns, column = np.unique(nxt, return_inverse=True)
        C = max(1, self.columns.size)
        self.n_columns = C
        flat = np.asarray(row, dtype=np.int64) * C + column
        self.cells, cell = np.unique(flat, return_inverse=True)
        self.by_block = sp.csr_matrix((np.asarray(count, dtype=np.float64), (block, cell)),
                                      shape=(self.n_blocks, self.cells.size))
        self.by_block.sum_duplicates()
        self.cells_total = np.asarray(self.by_block.sum(axis=0)).ravel()

    @classmethod
    def of_stream(cls, ids: np.ndarray, row_tokens: list[list[int]], block_tokens: int) -> BlockBigramCounts:
        """The counts of an encoded corpus ids (N,): every adjacent pair, blocks of ``block_tokens``
        positions."""
        ids = np.asarray(ids, dtype=np.int64)
        counts = block_pair_counts(ids[None, :], row_tokens, block_tokens)
        return cls(*counts, n_rows=len(row_tokens), n_blocks=math.ceil((ids.size - 1) / block_tokens))

    def totals(self, cell_counts: np.ndarray) -> np.ndarray:
        """(rows,) the pair count of each row from (K,) cell counts."""
        return np.bincount(self.cells // self.n_columns, weights=cell_counts, minlength=self.n_rows)

    def dense(self, cell_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(rows, C) counts and (rows,) totals from (K,) cell counts."""
        dense = np.zeros(self.n_rows * self.n_columns)
        dense[self.cells] = cell_counts
        dense = dense.reshape(self.n_rows, self.n_columns)
        return dense, dense.sum(axis=1)

    def resample(self, replicates: int, rng: np.random.Generator, chunk: int = 25):
        """Yield ``replicates`` bootstrap cell-count vectors (K,): ``n_blocks`` blocks drawn
        uniformly with replacement, their counts summed (one sparse product per chunk)."""
        by_cell = self.by_block.T.tocsr()  # (K, n_blocks)
        for start in range(0, replicates, chunk):
            size = min(chunk, replicates - start)
            draws = rng.multinomial(self.n_blocks, np.full(self.n_blocks, 1 / self.n_blocks), size=size)
            yield from np.asarray(by_cell @ draws.T.astype(np.float64)).T


def _interval(value: float | None, replicates: list[float], bootstrap: int) -> dict:
    """The percentile 95 % interval of the defined replicates, their count and mean."""
    ci, mean = None, None
    if value is not None and replicates:
        low, high = np.percentile(replicates, [2.5, 97.5])
        ci, mean = [float(low), float(high)], float(np.mean(replicates))
    return {"ci": ci, "bootstrap": {"replicates": bootstrap, "defined": len(replicates), "mean": mean}}


# --- embeddings: a model ------------------------------------------------------------------------


def embedding_structure(W_E: np.ndarray, tokenizer: TextTokenizer, groups: dict[str, WordGroup] = SYNTHETIC_GROUPS,
                        *, n_permutations: int = 1000, seed: int = 0) -> dict:
    """Score the same structures on a model's input-embedding rows of the group words, with the
    same permutation null as :func:`group_structure` (SPEC §7).

    A word's vector is the mean of the embedding rows of its single-token spellings (as written
    and capitalised, each preferring a leading space), so it uses every word the model's
    vocabulary spells in one token, whatever a corpus holds; there is no ``min_count``.

    **Interval.** None in the sense of a confidence interval: the embedding matrix is fixed, so
    there is no sampling of text to repeat (a bootstrap over the corpus does not apply), and a
    bootstrap over words would draw duplicate words, which breaks an order or a cycle. What can
    vary is which words were listed, so ``leave_one_out`` gives the range [min, max] of the score
    with each word in turn left out (for categories, each category word): how much the score
    rests on a single word. Whether the score is above chance is the permutation ``p_value``.

    Args:
        W_E: (V', d) input-embedding rows, indexed by the tokenizer's ids (padding rows ignored).
        tokenizer: the model's own tokenizer.
        groups: name -> :class:`~ctxstair.lm.corpus.WordGroup`.
        n_permutations, seed: the permutation null.

    Returns:
        A JSON-ready dict: ``dim``, ``null``; ``groups``: name -> {``kind``, ``measure``,
        ``value``, ``chance``, ``p_value``, ``ci`` (always None), ``leave_one_out`` ([min, max] or
        None), ``words``, ``missing``, and ``pca`` / ``explained`` as for signatures};
        ``categories`` as for signatures.
    """
    _check_counts(n_permutations=n_permutations)
    _check_groups(groups)
    W_E = np.asarray(W_E)
    if W_E.ndim != 2 or W_E.shape[0] < 1:
        raise InputError(f"W_E must be a (V, d) matrix, got shape {W_E.shape}")
    vectors: dict[str, np.ndarray] = {}
    listed, missing = {}, {}
    for name, group in groups.items():
        listed[name], missing[name] = [], {}
        for word in group.words:
            tokens = word_tokens(tokenizer, word)
            if tokens and max(tokens) >= W_E.shape[0]:
                raise InputError(f"the tokenizer spells {word!r} as token {max(tokens)}, beyond the "
                                 f"{W_E.shape[0]} embedding rows: tokenizer and embeddings do not match")
            if tokens:
                vectors[word] = W_E[tokens].astype(np.float64).mean(axis=0)
                listed[name].append(word)
            else:
                missing[name][word] = "not a single token"
    kinds = {name: group.kind for name, group in groups.items()}
    point = _score_groups(vectors, listed, kinds, keep_geometry=True)
    _add_nulls(point, kinds, n_permutations, np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[0]))

    # Leave one word out: the groups (and categories) each word's removal changes.
    category_words = point["categories"]["words"]
    ranges: dict[str, list[float]] = {key: [] for key in [*groups, "categories"]}
    for word in dict.fromkeys(w for words in listed.values() for w in words):
        fewer = {name: [w for w in words if w != word] for name, words in listed.items()}
        scores = _score_groups(vectors, fewer, kinds, keep_geometry=False)
        for name in groups:
            if (word in listed[name] or (kinds[name] == "category" and word in category_words)) \
                    and scores["groups"][name]["value"] is not None:
                ranges[name].append(scores["groups"][name]["value"])
        if word in category_words and scores["categories"]["value"] is not None:
            ranges["categories"].append(scores["categories"]["value"])

    def loo(key: str, value: float | None) -> dict:
        rng = ranges[key]
        return {"ci": None, "leave_one_out": [float(min(rng)), float(max(rng))] if rng and value is not None else None}

    result: dict = {"dim": int(W_E.shape[1]), "vocab_size": int(tokenizer.vocab_size),
                    "null": {"n_permutations": n_permutations, "seed": seed}, "groups": {}}
    for name, group in groups.items():
        entry = {"kind": group.kind, "measure": MEASURES[group.kind], **point["groups"][name],
                 "missing": missing[name]}
        result["groups"][name] = {**entry, **loo(name, entry["value"])}
    result["categories"] = {**point["categories"], **loo("categories", point["categories"]["value"])}
    return result


# --- scores and their permutation null ----------------------------------------------------------


def _score_groups(vectors: dict[str, np.ndarray], used: dict[str, list[str]], kinds: dict[str, str],
                  keep_geometry: bool) -> dict:
    """Score every group from the vectors of its used words (in listed order).

    Returns {``groups``: name -> {``value``, ``words``, + with ``keep_geometry``: ``pca``,
    ``explained`` and the private ``_coords`` (n, 2)}, ``categories``: {``value``,
    ``silhouette``, ``words``, ``labels``, ``pca``, ``explained``, ``_D``}}; private keys (``_``)
    feed :func:`_add_nulls` and are removed there.
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


def _add_nulls(point: dict, kinds: dict[str, str], n_permutations: int, rng: np.random.Generator) -> None:
    """Add ``chance`` and ``p_value`` (and ``chance_closed_form`` for cycles) to every scored
    group of :func:`_score_groups`'s result, in place, from ``n_permutations`` random listings
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


# --- helpers ------------------------------------------------------------------------------------


def _check_counts(**values: int) -> None:
    for name, value in values.items():
        smallest = 1 if name == "min_count" else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < smallest:
            what = "a positive" if smallest else "a non-negative"
            raise InputError(f"{name} must be {what} integer, got {value!r}")


def _check_groups(groups: dict[str, WordGroup]) -> None:
    for name, group in groups.items():
        if group.kind not in MEASURES:
            raise InputError(f"group {name!r} has kind {group.kind!r}; choose from {', '.join(MEASURES)}")


def _find_words(tokenizer: TextTokenizer, groups: dict[str, WordGroup], occurrences: np.ndarray,
                min_count: int) -> tuple[dict[str, dict[str, list[int]]], dict[str, dict[str, str]]]:
    """(group -> word -> its tokens, group -> word -> why it is left out): a word counts when it is a
    single token (as written or capitalised) whose ``occurrences`` (V,) sum to ``min_count`` or more."""
    found: dict[str, dict[str, list[int]]] = {}
    missing: dict[str, dict[str, str]] = {}
    for name, group in groups.items():
        found[name], missing[name] = {}, {}
        for word in group.words:
            tokens = word_tokens(tokenizer, word)
            total = int(occurrences[tokens].sum()) if tokens else 0
            if not tokens:
                missing[name][word] = "not a single token"
            elif total < min_count:
                missing[name][word] = f"occurs {total} times (< {min_count})"
            else:
                found[name][word] = tokens
    return found, missing


def word_tokens(tokenizer: TextTokenizer, word: str) -> list[int]:
    """The single tokens that spell ``word`` as written and capitalised ("may", "May"), each
    preferring the form with a leading space (see :meth:`TextTokenizer.word_token_id`)."""
    tokens = [tokenizer.word_token_id(spelling) for spelling in dict.fromkeys((word, word.capitalize()))]
    return list(dict.fromkeys(t for t in tokens if t is not None))


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


# --- text: the printout and the report ----------------------------------------------------------


def format_score(value: float | None) -> str:
    """A score with three decimals, or ``n/a`` when it could not be measured."""
    return "  n/a" if value is None else f"{value:.3f}"


def _entries(result: dict) -> list[tuple[str, str, dict]]:
    """(name, kind, entry) for every group and for all categories together."""
    rows = [(name, entry["kind"], entry) for name, entry in result["groups"].items()]
    return rows + [("categories", "all", result["categories"])]


def _outside(entry: dict) -> bool:
    """Whether the point lies outside its bootstrap interval (a biased bootstrap)."""
    return bool(entry.get("ci")) and not entry["ci"][0] <= entry["value"] <= entry["ci"][1]


def _interval_text(entry: dict) -> str:
    if entry.get("ci"):
        return f"[{entry['ci'][0]:.2f}, {entry['ci'][1]:.2f}]" + ("!" if _outside(entry) else "")
    if entry.get("leave_one_out"):
        return f"1-out [{entry['leave_one_out'][0]:.2f}, {entry['leave_one_out'][1]:.2f}]"
    return "—"


def _words_text(name: str, entry: dict) -> str:
    if name == "categories":
        return f"{len(entry['words'])} words, {len(set(entry['labels']))} groups"
    return f"{len(entry['words'])}/{len(entry['words']) + len(entry['missing'])} words"


def verdict(entry: dict) -> str:
    """``holds`` when the 95 % interval lies above chance (signatures) or, without an interval,
    when p < 0.05 (embeddings); ``weak`` when p < 0.05 but the interval reaches chance; ``no``
    otherwise; ``n/a`` when undefined."""
    if entry.get("value") is None or entry.get("chance") is None:
        return "n/a"
    significant = entry["p_value"] is not None and entry["p_value"] < 0.05
    if entry.get("ci"):
        if entry["ci"][0] > entry["chance"] and significant:
            return "holds"
        return "weak" if significant else "no"
    return "holds" if significant else "no"


def summary_lines(result: dict, embeddings: dict | None = None) -> list[str]:
    """The table ``ctxstair semantics`` prints: per group (and for all categories together) one
    line for the signatures and, with ``embeddings``, one for the model's embeddings — score,
    chance, 95 % CI (or the leave-one-out range), p, verdict, words used / listed — then a line
    of word counts (signatures) and of the words left out."""
    header = (f"{'group':11s} {'measure':27s} {'source':10s} {'score':>6s} {'chance':>6s} {'95% CI':>18s} "
              f"{'p':>6s} {'verdict':7s} words")
    lines = [header]
    sources = [("signatures", result)] + ([("embeddings", embeddings)] if embeddings is not None else [])
    for name, _kind, _ in _entries(result):
        for i, (source, res) in enumerate(sources):
            entry = res["categories"] if name == "categories" else res["groups"][name]
            measure = MEASURES["category"] if name == "categories" else entry["measure"]
            chance = "   n/a" if entry.get("chance") is None else f"{entry['chance']:6.3f}"
            p = "   n/a" if entry.get("p_value") is None else f"{entry['p_value']:6.3f}"
            lines.append(f"{name if i == 0 else '':11s} {measure if i == 0 else '':27s} {source:10s} "
                         f"{format_score(entry['value']):>6s} {chance} {_interval_text(entry):>18s} {p} "
                         f"{verdict(entry):7s} {_words_text(name, entry)}")
        if name != "categories":
            entry = result["groups"][name]
            counts = ", ".join(f"{w} {c}" for w, c in zip(entry["words"], entry["counts"]))
            left_out = "; ".join(f"{w}: {why}" for w, why in entry["missing"].items())
            lines.append(f"{'':11s} counts: {counts or '—'}" + (f"; left out: {left_out}" if left_out else ""))
            if embeddings is not None and embeddings["groups"][name]["missing"]:
                lines.append(f"{'':11s} not in the model's vocabulary as one token: "
                             f"{', '.join(embeddings['groups'][name]['missing'])}")
    if any(_outside(entry) for _, _, entry in _entries(result)):
        lines.append("! the score lies outside its bootstrap interval: resampled corpora score differently on "
                     "average (counting noise blurs the structure); see bootstrap.mean in semantics.json")
    return lines


def report_markdown(info: dict, embeddings: dict | None = None) -> str:
    """``report.md`` of ``ctxstair semantics``: the setting, then each structure's numbers in
    words next to what SPEC §7 expects, for the signatures and (if given) the embeddings, and a
    table. ``info`` is :func:`group_structure`'s result with ``corpus``, ``tokenizer`` (optionally
    ``tokenizer_description``) and, with embeddings, ``model`` added."""
    tokens = info.get("tokenizer_description", info["tokenizer"])
    lines = [f"# Corpus semantics: {info['corpus']}", "",
             f"Corpus `{info['corpus']}`, {info['n_tokens']:,} tokens ({tokens}). Next-token signatures "
             f"of each word; chance = mean of {info['null']['n_permutations']} random permutations of the order or "
             f"labels (seed {info['null']['seed']}); 95 % interval = percentile interval over "
             f"{info['bootstrap']['replicates']} bootstrap corpora of {info['bootstrap']['n_blocks']} blocks of "
             f"{info['bootstrap']['block_tokens']} tokens each."]
    if embeddings is not None:
        lines += ["", f"Embeddings: input-embedding rows of `{info['model']}` ({embeddings['dim']} dimensions, its own "
                      "tokenizer), the same null; no confidence interval (the matrix is fixed), the range with one "
                      "word left out instead."]
    lines += ["", "## Structures", ""]
    for name, kind, _ in _entries(info):
        expect = EXPECTATIONS["category"] if name == "categories" else EXPECTATIONS[kind]
        label = "all categories together" if name == "categories" else f"{name} ({kind})"
        parts = []
        for source, res in [("signatures", info)] + ([("embeddings", embeddings)] if embeddings else []):
            entry = res["categories"] if name == "categories" else res["groups"][name]
            parts.append(f"{source}: {_sentence(entry)}")
        lines.append(f"* **{label}** — expected: {expect}. " + " ".join(parts))
    lines += ["", "| group | source | measure | score | chance | 95 % CI | p | verdict | words used / listed |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, _, _ in _entries(info):
        for source, res in [("signatures", info)] + ([("embeddings", embeddings)] if embeddings else []):
            entry = res["categories"] if name == "categories" else res["groups"][name]
            measure = MEASURES["category"] if name == "categories" else entry["measure"]
            chance = "n/a" if entry.get("chance") is None else f"{entry['chance']:.3f}"
            p = "n/a" if entry.get("p_value") is None else f"{entry['p_value']:.3f}"
            score = format_score(entry["value"]).strip()
            lines.append(f"| {name} | {source} | {measure.replace('|', '&#124;')} | {score} | {chance} "
                         f"| {_interval_text(entry)} | {p} | {verdict(entry)} | {_words_text(name, entry)} |")
    lines += ["", "## Words and counts (signatures)", ""]
    for name, entry in info["groups"].items():
        counts = ", ".join(f"{w} {c}" for w, c in zip(entry["words"], entry["counts"])) or "none"
        left_out = "; ".join(f"{w} ({why})" for w, why in entry["missing"].items())
        lines.append(f"* {name}: {counts}" + (f". Left out: {left_out}" if left_out else ""))
    return "\n".join(lines) + "\n"


def _sentence(entry: dict) -> str:
    if entry.get("value") is None:
        return "not measurable (too few words)."
    text = f"{entry['value']:.2f}"
    if entry.get("ci"):
        text += f" (95 % CI {entry['ci'][0]:.2f} to {entry['ci'][1]:.2f}"
        if _outside(entry):
            text += (f"; the point lies outside it: resampled corpora average {entry['bootstrap']['mean']:.2f}, "
                     "counting noise shifts this score")
        text += ")"
    elif entry.get("leave_one_out"):
        text += f" (one word left out: {entry['leave_one_out'][0]:.2f} to {entry['leave_one_out'][1]:.2f})"
    if entry.get("chance") is None:
        return text + "."
    words = {"holds": "above chance: the structure holds",
             "weak": "p < 0.05 but the interval reaches chance: weak",
             "no": "not distinguishable from chance"}[verdict(entry)]
    return f"{text} vs chance {entry['chance']:.2f}, p = {entry['p_value']:.3f}: {words}."

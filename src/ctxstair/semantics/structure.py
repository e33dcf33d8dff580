"""Semantic structure of word groups in a corpus's next-token statistics and in a model's input
embeddings, each against chance and with its uncertainty (SPEC §7, "Corpus semantics").

For word groups with a known structure (:data:`~ctxstair.text.synthetic.SYNTHETIC_GROUPS` by default)
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

from ctxstair.checks import int_in_range
from ctxstair.errors import InputError
from ctxstair.semantics.scores import GROUP_MEASURES, add_nulls, score_groups
from ctxstair.signatures.blocks import block_pair_counts
from ctxstair.text.synthetic import SYNTHETIC_GROUPS, WordGroup
from ctxstair.text.tokenizer import TextTokenizer

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
        groups: name -> :class:`~ctxstair.text.synthetic.WordGroup`.
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
    int_in_range("block_tokens", block_tokens, 1)
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
        return score_groups(vectors, used, kinds, keep_geometry=full)

    point = measure(counts.cells_total, full=True)
    seeds = np.random.SeedSequence(seed).spawn(2)
    add_nulls(point, kinds, n_permutations, np.random.default_rng(seeds[0]))

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
        entry = {"kind": group.kind, "measure": GROUP_MEASURES[group.kind], **point["groups"][name],
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
        groups: name -> :class:`~ctxstair.text.synthetic.WordGroup`.
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
    point = score_groups(vectors, listed, kinds, keep_geometry=True)
    add_nulls(point, kinds, n_permutations, np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[0]))

    # Leave one word out: the groups (and categories) each word's removal changes.
    category_words = point["categories"]["words"]
    ranges: dict[str, list[float]] = {key: [] for key in [*groups, "categories"]}
    for word in dict.fromkeys(w for words in listed.values() for w in words):
        fewer = {name: [w for w in words if w != word] for name, words in listed.items()}
        scores = score_groups(vectors, fewer, kinds, keep_geometry=False)
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
        entry = {"kind": group.kind, "measure": GROUP_MEASURES[group.kind], **point["groups"][name],
                 "missing": missing[name]}
        result["groups"][name] = {**entry, **loo(name, entry["value"])}
    result["categories"] = {**point["categories"], **loo("categories", point["categories"]["value"])}
    return result


# --- helpers ------------------------------------------------------------------------------------


def _check_counts(**values: int) -> None:
    for name, value in values.items():
        int_in_range(name, value, 1 if name == "min_count" else 0)


def _check_groups(groups: dict[str, WordGroup]) -> None:
    for name, group in groups.items():
        if group.kind not in GROUP_MEASURES:
            raise InputError(f"group {name!r} has kind {group.kind!r}; choose from {', '.join(GROUP_MEASURES)}")


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


def group_word_tokens(tokenizer: TextTokenizer,
                      groups: dict[str, WordGroup] = SYNTHETIC_GROUPS) -> dict[str, list[int]]:
    """Each word of ``groups`` that ``tokenizer`` spells with single tokens -> those tokens
    (:func:`word_tokens`): what ``ctxstair corpus count --count groups`` counts."""
    words = dict.fromkeys(word for group in groups.values() for word in group.words)
    return {word: tokens for word in words if (tokens := word_tokens(tokenizer, word))}

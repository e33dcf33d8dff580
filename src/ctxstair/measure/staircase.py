"""The staircase measurement of a language model (SPEC §6.4, §7), defined once.

Every LM staircase number of the project comes from here: the analysis of our LM runs
(:mod:`ctxstair.analysis.lm_staircase`), ``ctxstair analyze-model`` on any checkpoint source
(:mod:`ctxstair.measure.analyze_model`) and the live monitor (:mod:`ctxstair.monitor.staircase`) are loops
around two pieces:

* :class:`StaircaseSetup`, the corpus side, built once: the token set T (:func:`staircase_tokens`),
  the next-token signatures' cosine matrix ``S^next``, the prefix labels and first-order prefix
  signatures ``φ^{y;1}``, the probe's split of T, and the sample of windows for the attention paths
  and path shares. It is built from windows in memory (:meth:`StaircaseSetup.from_windows`) or
  from counts made elsewhere, e.g. over sharded pretraining data (:meth:`StaircaseSetup.from_counts`).
* its measurement of model states (:meth:`StaircaseSetup.measure`: every estimator of
  :mod:`ctxstair.measure.estimators`), which returns rows in the one schema of
  :mod:`ctxstair.measure.schema` (``rho_next``, ``probe_heldout_mse``, ``attention_path_corr/ℓ``, ...).

The defaults (:class:`StaircaseSettings`), one set for all three, and why:

* ``k = 200`` tokens: SPEC §7's token set, the most frequent word-like tokens.
* ``prefix_labels = 1000``: the labels ν of the prefix signature, T and the most frequent next
  tokens (:func:`ctxstair.measure.primitives.prefix_labels`); word-like tokens alone miss most of the
  next-token mass of a real vocabulary. φ^{y;1} then has k × 1000 × k entries (320 MB in float64 at
  k = 200), the prefix counts of the corpus-statistics path.
* ``probe_steps = 300``, ``heldout_fraction = 0.25``: SPEC §3's probe settings and a quarter of T
  held out.
* ``attention_windows = 128``: the attention-path signature is counted on this sample, so a smaller
  one makes it noisier and raises its permutation null; on real text 128 windows put the early
  correlation at about twice the null (docs/language-models.md).
* ``path_windows = 4``: the path shares are ratios of gradient norms; they cost one backward pass
  per path (2L + 1) and window (about 35 s per window of 128 tokens for SmolLM2 on two CPU cores).
* ``null_permutations = 100``: a correlation above the null has p < 0.01.
* ``seed = 0`` seeds the probe's split and start, the shuffled control and the window sample.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ctxstair.alignment.similarity import signature_cosine
from ctxstair.checks import check_id_subset, check_sequences, int_in_range, positive_float
from ctxstair.config.lm import LMAnalysisConfig
from ctxstair.corpus.count import word_like_mask
from ctxstair.errors import InputError
from ctxstair.measure import estimators, primitives
from ctxstair.measure.estimators import States
from ctxstair.signatures.frequent import most_frequent

if TYPE_CHECKING:
    from ctxstair.config.lm import LMConfig
    from ctxstair.run import Run

#: Fewest tokens in T: the probe holds out pairs of tokens on each side.
MIN_TOKENS = 4


@dataclass(frozen=True)
class StaircaseSettings:
    """The settings of the LM staircase measurement; the defaults and their reasons are in the
    module docstring.

    Attributes:
        k: size of the token set T asked for (T may be smaller: fewer word-like tokens occur), >= 4.
        prefix_labels: labels of the prefix signature, >= 1.
        heldout_fraction: share of T held out by the probe, in (0, 1).
        probe_steps: Adam steps of each probe fit (SPEC §3), >= 0.
        probe_method: ``fast`` or ``reference`` (:func:`ctxstair.measure.primitives.prefix_probe`).
        attention_windows: windows sampled for the attention paths, >= 1.
        path_windows: the first of them used for the path shares, 1..attention_windows.
        null_permutations: token permutations of the attention-path null, >= 1.
        seed: the probe's split and start, the shuffled control and the window sample, >= 0.
        probe: measure the prefix probe and its control.
        paths: the measures of the network: attention paths, path shares, unembedding alignment (models
            with a view, :mod:`ctxstair.models.view`).
    """

    # The defaults are the LM runs' config's (one source; the reasons are in the module docstring).
    k: int = LMAnalysisConfig.k
    prefix_labels: int = LMAnalysisConfig.prefix_labels
    heldout_fraction: float = LMAnalysisConfig.heldout_fraction
    probe_steps: int = LMAnalysisConfig.probe_steps
    probe_method: str = LMAnalysisConfig.probe
    attention_windows: int = LMAnalysisConfig.windows
    path_windows: int = LMAnalysisConfig.path_windows
    null_permutations: int = primitives.NULL_PERMUTATIONS
    seed: int = LMAnalysisConfig.seed
    probe: bool = True
    paths: bool = True

    def __post_init__(self):
        for name, low in (("k", MIN_TOKENS), ("prefix_labels", 1), ("probe_steps", 0), ("attention_windows", 1),
                          ("null_permutations", 1), ("seed", 0)):
            int_in_range(name, getattr(self, name), low)
        int_in_range("path_windows", self.path_windows, 1, self.attention_windows)
        if not 0 < positive_float(self.heldout_fraction, "heldout_fraction") < 1:
            raise InputError(f"heldout_fraction must be in (0, 1), got {self.heldout_fraction!r}")
        if self.probe_method not in ("fast", "reference"):
            raise InputError(f"unknown probe method {self.probe_method!r}; allowed: fast, reference")

    def to_dict(self) -> dict:
        """The settings as a JSON-ready dict (what every output records)."""
        return dataclasses.asdict(self)


def staircase_tokens(windows: np.ndarray, tokenizer, k: int) -> np.ndarray:
    """The token set T of SPEC §7: the ``k`` most frequent word-like tokens of ``windows``.

    Word-like: the token decodes to letters only once one leading space marker is stripped
    (:meth:`ctxstair.text.tokenizer.TextTokenizer.word_like`); ids the tokenizer does not know (a
    padded embedding matrix, special tokens past its vocabulary) never are. Only the ids that occur
    are decoded (a 50k vocabulary takes seconds); equal counts go to the smaller id
    (:func:`ctxstair.measure.primitives.eligible_tokens`).

    Args:
        windows: int (n, T_win) token ids >= 0.
        tokenizer: a :class:`~ctxstair.text.tokenizer.TextTokenizer`.
        k: how many tokens, >= 4.

    Returns:
        int64 (k',) ids, most frequent first, ``4 <= k' <= k``; InputError when fewer than 4 occur.
    """
    k = int_in_range("k", k, MIN_TOKENS)
    X = np.asarray(windows)
    counts = np.bincount(X.ravel(), minlength=tokenizer.vocab_size) if X.size else np.zeros(tokenizer.vocab_size)
    tokens = most_frequent(counts, k, eligible=word_like_mask(tokenizer, counts))
    if tokens.size < MIN_TOKENS:
        raise InputError(f"the corpus has only {tokens.size} distinct word-like tokens; need at least {MIN_TOKENS}")
    return tokens


class StaircaseSetup:
    """The corpus side of the measurement (module docstring), built once and shared by every model
    state it measures. Build it with :meth:`from_windows` or :meth:`from_counts`.

    Attributes:
        settings: the :class:`StaircaseSettings`.
        tokens: int64 (T,) the token set, most frequent first.
        token_strings: the tokens' strings (None when no tokenizer was given).
        vocab_size: V, the labels of the next-token and attention-path signatures: the rows of the
            embedding matrices measured (None until the first measurement when not known in advance).
        train_idx, heldout_idx: the probe's fixed split of T (indices into ``tokens``).
        sample: int (n, T_win) the windows for the attention paths and path shares, in the order of
            a permutation of all windows seeded with ``settings.seed`` (``sample_indices``).
        corpus: ``windows`` (how many the statistics were counted over) and ``window`` (tokens each).
    """

    def __init__(self, settings: StaircaseSettings, tokens: np.ndarray, sample: np.ndarray,
                 sample_indices: np.ndarray, *, vocab_size: int | None = None,
                 token_strings: Sequence[str] | None = None, windows: np.ndarray | None = None,
                 next_counts: np.ndarray | None = None, prefix: tuple[np.ndarray, np.ndarray] | None = None,
                 corpus: dict | None = None):
        self.settings = settings
        self.corpus = corpus or {"windows": int(windows.shape[0]), "window": int(windows.shape[1])}
        self.tokens = np.asarray(tokens, dtype=np.int64)
        self.token_strings = None if token_strings is None else list(token_strings)
        self.sample, self.sample_indices = sample, np.asarray(sample_indices, dtype=np.int64)
        self._windows, self._next_counts, self._S_next = windows, next_counts, None
        self.vocab_size: int | None = None
        if vocab_size is not None:
            self.next_cosines(int_in_range("vocab_size", vocab_size, 1))
        self.train_idx, self.heldout_idx = primitives.token_split(self.tokens.size, settings.heldout_fraction,
                                                                settings.seed)
        if prefix is not None:  # fills the cached properties
            self.__dict__["prefix"], self.__dict__["prefix_labels"] = prefix, prefix[0]
        self._sample_length: int | None = None
        self._derived: dict[str, object] = {}

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_windows(cls, windows: np.ndarray, tokenizer=None, settings: StaircaseSettings | None = None, *,
                     vocab_size: int | None = None, tokens: np.ndarray | None = None) -> StaircaseSetup:
        """The setup of a corpus held as token windows.

        Args:
            windows: int (n, T_win), T_win >= 2: every statistic is counted over all of them, and the
                sample is drawn from them.
            tokenizer: chooses T (:func:`staircase_tokens`) and names it; may be None when ``tokens``
                is given.
            settings: default :class:`StaircaseSettings`.
            vocab_size: V when known (the embedding rows); else set by the first measurement.
            tokens: T given instead of chosen (distinct ids, >= 4).

        The prefix signatures are counted when first needed (:attr:`prefix`), so a monitor that never
        fits the probe never builds them.
        """
        settings = settings or StaircaseSettings()
        X = _windows_array(windows)
        if tokens is None:
            if tokenizer is None:
                raise InputError("the setup needs a tokenizer to choose its tokens, or the tokens themselves")
            tokens = staircase_tokens(X, tokenizer, settings.k)
        else:
            tokens = _token_set(tokens, X)
        strings = None if tokenizer is None else [tokenizer.token_string(int(t)) for t in tokens]
        chosen = np.random.default_rng(settings.seed).permutation(X.shape[0])[: settings.attention_windows]
        return cls(settings, tokens, X[chosen], chosen, vocab_size=vocab_size, token_strings=strings, windows=X)

    @classmethod
    def from_counts(cls, tokens: np.ndarray, next_counts: np.ndarray, sample: np.ndarray, *,
                    settings: StaircaseSettings | None = None, prefix_labels: np.ndarray | None = None,
                    prefix_counts: np.ndarray | None = None, sample_indices: np.ndarray | None = None,
                    token_strings: Sequence[str] | None = None, corpus: dict | None = None) -> StaircaseSetup:
        """The setup of a corpus counted elsewhere (e.g. over sharded pretraining data): exact integer
        counts, summed over the corpus, instead of its windows.

        Args:
            tokens: int (T,) the token set.
            next_counts: (T, V) next-token pair counts of the tokens over the whole vocabulary V (the
                rows of :class:`~ctxstair.signatures.NextTokenCounts`); a row's sum is the token's
                number of events, positions with a next token.
            sample: int (n, T_win) the windows for the attention paths.
            prefix_labels: the labels (Y,) of the probe's prefix counts.
            prefix_counts: the counts (T, Y, T) of :func:`~ctxstair.signatures.prefix_counts` over
                context T, for the probe.
            sample_indices: where the sample's windows sit in the corpus (recorded only).
            token_strings: the tokens' strings.
            corpus: what was counted, ``windows`` and ``window`` (recorded only; default: the sample's).

        Equal, on the same windows, to :meth:`from_windows`.
        """
        settings = settings or StaircaseSettings()
        tokens = check_id_subset(np.asarray(tokens), np.asarray(next_counts).shape[1], "tokens")
        counts = np.asarray(next_counts, dtype=np.float64)
        if counts.shape[0] != tokens.size:
            raise InputError(f"next_counts must have one row per token, got shape {counts.shape} for {tokens.size}")
        prefix = None
        if prefix_counts is not None:
            events = counts.sum(axis=1)
            phi = np.asarray(prefix_counts, dtype=np.float64) / np.maximum(events, 1)[:, None, None]
            prefix = (np.asarray(prefix_labels, dtype=np.int64), phi)
        X = _windows_array(sample)
        indices = np.arange(X.shape[0]) if sample_indices is None else sample_indices
        return cls(settings, tokens, X, indices, vocab_size=counts.shape[1], token_strings=token_strings,
                   next_counts=counts, prefix=prefix,
                   corpus=corpus or {"windows": int(X.shape[0]), "window": int(X.shape[1])})

    @classmethod
    def from_stats(cls, stats, settings: StaircaseSettings | None = None, *, tokenizer=None,
                   vocab_size: int | None = None) -> StaircaseSetup:
        """The setup of a statistics directory (:func:`ctxstair.corpus.count_corpus`): equal, on the same
        windows, to :meth:`from_windows` with the same settings.

        Args:
            stats: a :class:`~ctxstair.corpus.CorpusStats` or its path; it must hold the next-token rows
                and the sample (and the prefix counts with the probe), counted for these settings (the
                same ``k`` unless its tokens were given, ``prefix_labels`` and ``seed``; at least
                ``attention_windows`` sample windows, of which the first are used).
            settings: default :class:`StaircaseSettings`.
            tokenizer: names the tokens; statistics of another tokenizer are refused.
            vocab_size: V, the embedding rows measured (default: the statistics'); a padded embedding
                matrix may have more rows than the statistics' vocabulary, never fewer.
        """
        from ctxstair.corpus import CorpusStats

        settings = settings or StaircaseSettings()
        stats = stats if isinstance(stats, CorpusStats) else CorpusStats(stats)
        stats.require("next", "sample", *(("prefix",) if settings.probe else ()))
        stats.check_tokenizer(tokenizer)
        counted = stats.manifest["settings"]
        wanted = {"prefix_labels": settings.prefix_labels, "seed": settings.seed}
        if counted["tokens"] == "chosen":
            wanted["k"] = settings.k
        differ = [f"{name} {counted[name]} (asked {value})" for name, value in wanted.items() if counted[name] != value]
        if counted["attention_windows"] < settings.attention_windows and counted["attention_windows"] < \
                stats.manifest["windows"]:
            differ.append(f"attention_windows {counted['attention_windows']} (asked {settings.attention_windows})")
        if differ:
            raise InputError(f"{stats.path} was counted for other settings: {', '.join(differ)}; count it again "
                             "with these settings")
        rows = stats.next_rows()
        V = stats.vocab_size if vocab_size is None else int_in_range("vocab_size", vocab_size, 1)
        if stats.vocab_size > V:
            raise InputError(f"the model has {V} embedding rows, but {stats.path} counts ids up to "
                             f"{stats.vocab_size - 1}")
        rows = np.pad(rows, ((0, 0), (0, V - stats.vocab_size)))
        tokens = stats.array("tokens")
        n = settings.attention_windows
        return cls.from_counts(tokens, rows, stats.array("sample")[:n], settings=settings,
                               prefix_labels=stats.array("prefix_labels") if settings.probe else None,
                               prefix_counts=stats.array("prefix_counts") if settings.probe else None,
                               sample_indices=stats.array("sample_indices")[:n],
                               token_strings=None if tokenizer is None else [tokenizer.token_string(int(t))
                                                                             for t in tokens],
                               corpus={"windows": stats.manifest["windows"], "window": stats.window,
                                       "stats": str(stats.path)})

    # ------------------------------------------------------------------ the corpus side

    def next_cosines(self, vocab_size: int) -> np.ndarray:
        """``S^next`` (T, T): the cosine matrix of the tokens' next-token signatures over ``vocab_size``
        next tokens, computed once; InputError when a measured model has another number of rows."""
        if self._S_next is None:
            if self._next_counts is not None:
                rows = self._next_counts.sum(axis=1, keepdims=True)
                phi = np.divide(self._next_counts, rows, out=np.zeros_like(self._next_counts), where=rows > 0)
            else:
                from ctxstair.signatures import next_token_signature

                check_sequences(self._windows, vocab_size, "windows")
                phi = next_token_signature(self._windows, vocab_size, tokens=self.tokens)
            self._S_next, self.vocab_size = signature_cosine(phi), vocab_size
        elif vocab_size != self.vocab_size:
            raise InputError(f"the model has {vocab_size} embedding rows, but the staircase setup's signatures are "
                             f"over vocab_size={self.vocab_size}")
        return self._S_next

    @functools.cached_property
    def prefix_labels(self) -> np.ndarray:
        """The labels ν of the prefix signature (Y,): T and the most frequent next tokens
        (:func:`ctxstair.measure.primitives.prefix_labels`), ``settings.prefix_labels`` in all."""
        # The labels do not depend on V beyond the largest id: ids above it never occur.
        return primitives.prefix_labels(self._windows, self.tokens, int(self._windows.max()) + 1,
                                      total=self.settings.prefix_labels)

    @functools.cached_property
    def prefix(self) -> tuple[np.ndarray, np.ndarray]:
        """``(labels, φ^{y;1})``: :attr:`prefix_labels` and the tokens' prefix signatures (T, Y, T) over
        context T (:func:`~ctxstair.signatures.prefix_signature`), counted on first use."""
        from ctxstair.signatures import prefix_signature

        labels = self.prefix_labels
        return labels, prefix_signature(self._windows, self.tokens, labels, self.tokens)

    def path_sample(self, positions: int) -> np.ndarray:
        """The attention-path sample cut to a model's ``positions`` (its ``max_seq_len``) when its windows
        are longer; the first model measured fixes the length, and a later one with fewer positions
        is refused (InputError): its numbers would come from other windows."""
        if self._sample_length is None:
            self._sample_length = min(self.sample.shape[1], int(positions))
        elif positions < self._sample_length:
            raise InputError(f"this model has only {positions} positions, fewer than the {self._sample_length} of the "
                             "first model measured: not one series")
        return self.sample[:, : self._sample_length]

    def record(self) -> dict:
        """What every output records of the setup, JSON-ready: the settings, the corpus counted, V, T and
        its strings, the number of prefix labels and the held-out tokens (with the probe), the sample's
        window indices (with the paths)."""
        settings = self.settings
        return {"settings": settings.to_dict(), "corpus": self.corpus, "vocab_size": self.vocab_size,
                "tokens": self.tokens.tolist(), "token_strings": self.token_strings,
                "prefix_labels": int(self.prefix_labels.size) if settings.probe else None,
                "heldout_tokens": self.tokens[self.heldout_idx].tolist() if settings.probe else [],
                "sample": self.sample_indices.tolist() if settings.paths else []}

    # ------------------------------------------------------------------ the measurement

    @property
    def windows(self) -> np.ndarray | None:
        """The corpus windows the statistics were counted over (None for a setup built from counts)."""
        return self._windows

    def derived(self, name: str, compute: Callable[[], object]) -> object:
        """A corpus-side quantity an estimator needs, computed on first use and kept with the setup."""
        if name not in self._derived:
            self._derived[name] = compute()
        return self._derived[name]

    def measure(self, states: States, *, probe: bool | None = None, paths: bool | None = None,
                seconds: dict[str, float] | None = None, report: str | None = None) -> list[dict]:
        """One row per model state (:class:`~ctxstair.measure.estimators.States`) in the one schema of
        :mod:`ctxstair.measure.schema`: every estimator of :mod:`ctxstair.measure.estimators` that is on —
        ρ_next always, the probe with ``probe``, the measures of the network (attention paths, path
        shares, unembedding alignment) with ``paths`` and a network (default: the settings') — in the
        model's dtype. ``seconds`` gets the wall time of each switch added (``embeddings``, ``probe``,
        ``paths``); ``report`` names the work in the progress on stderr
        (:func:`ctxstair.measure.estimators.measure`)."""
        switches = {"probe": self.settings.probe if probe is None else bool(probe),
                    "paths": self.settings.paths if paths is None else bool(paths)}
        return estimators.measure(self, states, switches, seconds, report)


def settings_of(cfg: LMConfig) -> StaircaseSettings:
    """The measurement settings of an LM run's config (its ``analysis`` section)."""
    a = cfg.analysis
    everything = a.measures == "all"
    return StaircaseSettings(k=a.k, prefix_labels=a.prefix_labels, heldout_fraction=a.heldout_fraction,
                             probe_steps=a.probe_steps, probe_method=a.probe, attention_windows=a.windows,
                             path_windows=a.path_windows, seed=a.seed, probe=everything, paths=everything)


def run_setup(run: Run, settings: StaircaseSettings | None = None) -> StaircaseSetup:
    """The staircase setup of an LM run: its training windows (the held-out windows of the validation
    loss left out; a seeded sample of ``analysis.max_windows`` of them when there are more), its
    tokenizer, V = the tokenizer's vocabulary, and ``settings`` (default: those
    of the run's config, :func:`settings_of`); or, when the config's ``analysis.stats`` names a
    statistics directory, that directory's counts (:meth:`StaircaseSetup.from_stats`)."""
    from ctxstair.text.windows import corpus_windows, read_tokenizer, sample_indices, split_indices

    settings = settings or settings_of(run.config)
    if run.config.analysis.stats:
        tokenizer = read_tokenizer(run.path)
        return StaircaseSetup.from_stats(run.config.analysis.stats, settings, tokenizer=tokenizer,
                                         vocab_size=tokenizer.vocab_size)
    tokenizer, windows = corpus_windows(run.config, run.path)
    train, _ = split_indices(len(windows), run.config.train.seed)
    train = windows[sample_indices(train, run.config.analysis.max_windows, run.config.analysis.seed)]
    return StaircaseSetup.from_windows(train, tokenizer, settings, vocab_size=tokenizer.vocab_size)


def _windows_array(windows: object) -> np.ndarray:
    """``windows`` (numpy or torch, any device) as an int64 (n, T) array with T >= 2 and ids >= 0."""
    if hasattr(windows, "detach"):
        windows = windows.detach().cpu().numpy()
    X = np.asarray(windows)
    if X.dtype.kind not in "iu" or X.ndim != 2:
        raise InputError(f"windows must be a 2-D integer array (n windows, T tokens), got {X.dtype} shape {X.shape}")
    if X.shape[0] < 1 or X.shape[1] < 2:
        raise InputError(f"windows must hold at least one window of T >= 2 tokens, got shape {X.shape}")
    if X.min() < 0:
        raise InputError(f"windows contain the negative token id {X.min()}")
    return X.astype(np.int64, copy=False)


def _token_set(tokens: object, windows: np.ndarray) -> np.ndarray:
    """Given tokens (numpy, list or torch) checked: distinct ids >= 0, at least :data:`MIN_TOKENS`."""
    if hasattr(tokens, "detach"):
        tokens = tokens.detach().cpu().numpy()
    ids = np.asarray(tokens)
    bound = int(windows.max()) + 1
    if ids.dtype.kind in "iu" and ids.ndim == 1 and ids.size:
        bound = max(bound, int(ids.max()) + 1)
    ids = check_id_subset(ids, bound, "tokens")
    if ids.size < MIN_TOKENS:
        raise InputError(f"tokens must hold at least {MIN_TOKENS} token ids (the probe holds out pairs), "
                         f"got {ids.size}")
    return ids

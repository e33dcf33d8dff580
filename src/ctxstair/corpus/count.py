"""Count a tokenized corpus once, on many workers, into a statistics directory (SPEC §7).

:func:`count_corpus` is map-reduce over work units (:mod:`ctxstair.corpus.units`):

1. the sources are opened and, in a thread, hashed while the first units count (the hash takes
   another core, not time before the count), and the plan (sources with their hashes, window, what
   is counted, the settings) is written to ``OUT/.units/plan.json`` before any unit is recorded done;
2. the ``unigram`` pass counts every unit; each unit's arrays are written to
   ``OUT/.units/<unit>.safetensors`` and then its completion record ``<unit>.json``, both atomically,
   so a count killed midway and started again with ``resume=True`` skips the finished units;
3. the tracked tokens T are chosen from the summed unigram counts (the ``k`` most frequent
   word-like ones, :func:`ctxstair.signatures.frequent.most_frequent`) or given, and the prefix
   labels from the counts at positions >= 1 (:func:`~ctxstair.signatures.frequent.label_set`);
4. the ``rows`` pass counts the next-token rows and prefix counts of T on every unit;
5. the sums (exact integers, in unit order; integer sums do not depend on the order or on the
   number of workers) and the seeded sample of windows are written, each array in its compact layout
   (:mod:`ctxstair.corpus.stats`), the manifest last, and the work folder is removed.

The statistics are those of the in-memory functions on the same windows: ``unigram`` is
``np.bincount(windows)``, the next-token rows are :class:`~ctxstair.signatures.NextTokenCounts`'
counts, the prefix counts :func:`~ctxstair.signatures.prefix_counts`'.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from ctxstair.checks import check_dense_size, check_id_subset, int_in_range
from ctxstair.corpus.executors import Executor
from ctxstair.corpus.sources import open_source, windows
from ctxstair.corpus.stats import RECORD_SUFFIX, CorpusStats, csr_parts, tokenizer_identity, write_stats
from ctxstair.corpus.units import (
    MAX_UNIT_TOKENS,
    ROWS,
    UNIGRAM,
    Job,
    SourceSpec,
    Unit,
    ordinary_pages,
    split_units,
    sum_sparse,
    window_index,
)
from ctxstair.errors import InputError
from ctxstair.io import atomic_write_text, claim_output
from ctxstair.progress import Progress
from ctxstair.signatures.frequent import label_set, most_frequent

#: What a count can hold; the default is what the LM staircase measurement needs.
COUNTABLE = ("unigram", "next", "prefix", "sample", "bigram", "groups")
DEFAULT_COUNT = ("unigram", "next", "prefix", "sample")
WORK = ".units"
#: Tokens per window by default: ``analyze-model``'s windows.
WINDOW = 128
#: The LM staircase measurement's defaults (:class:`ctxstair.measure.staircase.StaircaseSettings`, whose
#: reasons are there), repeated because the config that holds them imports torch, which counting
#: never needs; a test checks they are equal.
K, PREFIX_LABELS, SAMPLE_WINDOWS, SEED = 200, 1000, 128, 0
#: Largest default unit (tokens): a unit's prefix counts are one dense (T, Y, T) int32 file.
UNIT_TOKENS = 1 << 27
#: Fewest tokens per local worker (:func:`workers_for`) for a count with any of :data:`HEAVY_COUNTS`:
#: a worker cost about a second to start when this was set (a third of a second since its imports
#: left out scipy.stats) and its unit files up to half a second to sum, which a share of fewer tokens
#: does not repay (benchmarks/RESULTS.md, "Corpus statistics over a token file").
TOKENS_PER_WORKER = 1 << 25
#: The same for a count without them (unigram counts, next-token rows, sample): it counts about four
#: times as many tokens per second on one core (45 against 12 M), so a worker needs four times the
#: tokens to repay its start (2 workers took 1.35× one's time at 100 M tokens, 0.65× at 1 B).
LIGHT_TOKENS_PER_WORKER = 1 << 27
#: The statistics whose counting dominates a count's time when they are in it.
HEAVY_COUNTS = ("prefix", "bigram", "groups")


def workers_for(n_tokens: int, workers: int, count=DEFAULT_COUNT) -> int:
    """The local workers a count of ``n_tokens`` tokens of the statistics ``count`` starts: ``workers``
    at most, and one per :data:`TOKENS_PER_WORKER` tokens (:data:`LIGHT_TOKENS_PER_WORKER` when no
    statistic of :data:`HEAVY_COUNTS` is counted), at least one. The statistics do not depend on it
    (integer sums), only the time does."""
    share = TOKENS_PER_WORKER if set(count) & set(HEAVY_COUNTS) else LIGHT_TOKENS_PER_WORKER
    return max(1, min(workers, n_tokens // share))


def word_like_mask(tokenizer, counts: np.ndarray) -> np.ndarray:
    """bool (len(counts),): the ids that occur (``counts > 0``) and that ``tokenizer`` calls word-like
    (:meth:`~ctxstair.text.tokenizer.TextTokenizer.word_like`); only those are decoded, and ids past the
    tokenizer's vocabulary (a padded embedding matrix) never are word-like."""
    mask = np.zeros(len(counts), dtype=bool)
    present = np.flatnonzero(np.asarray(counts)[: tokenizer.vocab_size] > 0)
    mask[present] = tokenizer.word_like(present)
    return mask


def count_corpus(sources, out: str | os.PathLike, *, tokenizer=None, vocab_size: int | None = None,
                 window: int = WINDOW, documents: str = "joined", count=DEFAULT_COUNT, tokens=None,
                 k: int | None = None, prefix_labels: int | None = None, attention_windows: int | None = None,
                 seed: int | None = None, groups: dict[str, list[int]] | None = None, block_tokens: int = 1000,
                 dtype: str | None = None, column: str | None = None, workers: int = 1, ray: str | None = None,
                 unit_tokens: int | None = None, resume: bool = False, force: bool = False,
                 max_bytes: int | None = None, progress: bool | None = None, text_ok: bool = False) -> CorpusStats:
    """Count ``sources`` into the statistics directory ``out`` (module docstring) and return it.

    Args:
        sources: paths of token files (``.bin``, ``.npy``, Megatron ``.bin``/``.idx``, Parquet, Arrow;
            :func:`ctxstair.corpus.sources.open_source`), or folders of them.
        out: the statistics directory, created, resumed (``resume``) or replaced (``force``) by the one
            output rule of :func:`ctxstair.io.claim_output`.
        tokenizer: the tokenizer the ids come from (chooses T, names it, and identifies the statistics);
            may be None when ``tokens`` and ``vocab_size`` are given.
        vocab_size: V (default: the tokenizer's); ids >= V are refused.
        window: tokens per window; documents: ``joined`` or ``separate`` (how windows are cut,
            :func:`ctxstair.corpus.sources.windows`).
        count: which statistics (:data:`COUNTABLE`).
        tokens: the tracked tokens T given, instead of the ``k`` most frequent word-like ones.
        k: how many tracked tokens; prefix_labels, attention_windows, seed: with ``k``, the LM staircase
            settings counted for (default: :class:`ctxstair.measure.staircase.StaircaseSettings`'s, which are
            the LM runs' :class:`~ctxstair.config.lm.LMAnalysisConfig`).
        groups: with ``groups`` counted, the words of ``ctxstair semantics`` (word -> its token ids)
            whose next-token pairs are counted per block of ``block_tokens`` positions.
        dtype: the token dtype of flat ``.bin`` files; column: the token column of tables; text_ok: whether
            a flat ``.bin`` that reads as text is counted (:func:`~ctxstair.corpus.flat.refuse_text`).
        workers: local worker processes, at most (fewer for a small corpus, :func:`workers_for`);
            ray: a Ray address (``local``, ``auto`` or an address), instead of local processes.
        unit_tokens: tokens per work unit (default: an equal share of the corpus per worker, at most
            :data:`UNIT_TOKENS`: every unit writes its dense counts, about 200 MB at the defaults, so
            fewer, larger units cost less; a unit of the default size counts for about 20 s per core, a
            kill loses at most that); a resumed count keeps its plan's.
        max_bytes: budget of the dense arrays held by the workers together (default 2 GiB).
        progress: report the tokens counted on stderr (:class:`ctxstair.progress.Progress`; default:
            inside :func:`ctxstair.progress.shown`, as the command line does).
    """
    k = int_in_range("k", K if k is None else k, 1)
    prefix_labels = int_in_range("prefix_labels", PREFIX_LABELS if prefix_labels is None else prefix_labels, 1)
    attention_windows = int_in_range("attention_windows",
                                     SAMPLE_WINDOWS if attention_windows is None else attention_windows, 1)
    seed = int_in_range("seed", SEED if seed is None else seed, 0)
    count = _check_count(count)
    documents = _choice(documents, ("joined", "separate"), "documents")
    window = int_in_range("window", window, 2)
    workers = int_in_range("workers", workers, 1)
    vocab_size = _vocab_size(vocab_size, tokenizer)
    if tokens is None and tokenizer is None and ("next" in count or "prefix" in count):
        raise InputError("the tracked tokens are chosen with the tokenizer: give a tokenizer or the tokens")
    given = None if tokens is None else check_id_subset(np.asarray(tokens), vocab_size, "tokens")
    if ("groups" in count) != (groups is not None):
        raise InputError("the word groups are counted with groups= (word -> token ids) and only then")
    specs, counts = _open_sources(sources, window, documents, dtype, column, text_ok)
    total_windows = sum(counts)
    if total_windows == 0:
        raise InputError(f"the sources hold no window of {window} tokens")
    # Local workers only: a Ray cluster's workers are already running.
    workers = workers_for(total_windows * window, workers, count) if ray is None else workers
    _check_budget(count, k if given is None else given.size, prefix_labels, vocab_size, workers, max_bytes)
    settings = {"window": window, "documents": documents, "vocab_size": vocab_size,
                "tokenizer": _tokenizer_of(specs, tokenizer), "count": list(count),
                "tokens_given": None if given is None else given.tolist(), "k": k, "prefix_labels": prefix_labels,
                "attention_windows": attention_windows, "seed": seed, "groups": _groups_plan(groups, block_tokens),
                "unit_tokens": _unit_tokens(unit_tokens, total_windows, window, workers)}
    with ordinary_pages(), Executor(workers, ray) as executor, ThreadPoolExecutor(1) as hashing:
        executor.start()  # the workers start and import while the sources are hashed, once per count
        hashed = hashing.submit(lambda: [_describe(spec) for spec in specs])  # beside the first units' counting
        output = claim_output(out, resume=resume, force=force, what="statistics directory",
                              start=lambda folder: (folder / WORK).mkdir(parents=True),
                              same=lambda folder: _same_plan(folder, _with_sources(settings, hashed)))
        try:
            _count(output.path, specs, counts, settings, hashed, count, given, tokenizer, executor, progress)
        except InputError:
            if not output.resumed:  # bad data found while counting: nothing half-written stays
                shutil.rmtree(output.path, ignore_errors=True)
            raise
    output.commit()
    return CorpusStats(output.final)


def _count(folder: Path, specs: list[SourceSpec], counts: list[int], settings: dict, hashed: Future,
           count: tuple[str, ...], given: np.ndarray | None, tokenizer, executor: Executor,
           progress: bool | None) -> None:
    """The passes of :func:`count_corpus` (module docstring) into the claimed ``folder``: ``settings`` are
    this call's, ``hashed`` the sources described and hashed in a thread (:func:`_with_sources`)."""
    work = folder / WORK
    recorded = work / "plan.json"
    plan = json.loads(recorded.read_text()) if recorded.is_file() else settings  # a resumed count keeps its units

    def record_plan() -> None:  # before the first unit is recorded done, so that a resume can check it
        if not recorded.is_file():
            _write_plan(folder, _with_sources(settings, hashed))

    window, documents, vocab_size = plan["window"], plan["documents"], plan["vocab_size"]
    k, prefix_labels, seed = plan["k"], plan["prefix_labels"], plan["seed"]
    total_windows = sum(counts)
    n_tokens = total_windows * window
    rows_pass = "next" in count or "prefix" in count
    # The first pass is skipped only when nothing needs it: given tokens, next-token rows alone.
    first_pass = given is None or bool({"unigram", "bigram", "prefix", "groups"} & set(count))
    with Progress(n_tokens * (first_pass + rows_pass), f"corpus count {folder.name}", "tok", unit_scale=True,
                  show=progress) as bar:
        arrays, tracked = {}, given
        if first_pass:
            rows = None if plan["groups"] is None else tuple(tuple(ids) for ids in plan["groups"]["words"].values())
            job = Job(tuple(specs), window, documents, vocab_size, bigram="bigram" in count, groups=rows,
                      block_tokens=1 if plan["groups"] is None else plan["groups"]["block_tokens"])
            first = _sum_units(job, split_units(UNIGRAM, counts, window, plan["unit_tokens"]), work, executor, bar,
                               record_plan)
            if given is None and tokenizer is not None:
                tracked = most_frequent(first["unigram"], k, eligible=word_like_mask(tokenizer, first["unigram"]))
            arrays.update({name: first[name] for name in ("unigram", "next_position")})
        if "bigram" in count:
            arrays["bigram.keys"], arrays["bigram.counts"] = first["bigram.keys"], first["bigram.counts"]
        if "groups" in count:
            arrays.update(_group_arrays(first, len(plan["groups"]["words"]), vocab_size))
        if rows_pass:
            if tracked.size == 0:
                raise InputError("no word-like token occurs in the corpus: give the tokens to track")
            labels = label_set(first["next_position"], tracked, prefix_labels) if "prefix" in count else None
            rows_job = Job(tuple(specs), window, documents, vocab_size, tokens=tuple(tracked.tolist()),
                           labels=None if labels is None else tuple(labels.tolist()), next_rows="next" in count)
            second = _sum_units(rows_job, split_units(ROWS, counts, window, plan["unit_tokens"]), work, executor,
                                bar, record_plan)
            arrays["tokens"] = tracked
            if "next" in count:
                arrays.update(_csr(second["next_rows"]))
                arrays["events"] = second["next_rows"].sum(axis=1)
            if "prefix" in count:
                arrays["prefix_labels"], arrays["prefix_counts"] = labels, second["prefix_counts"]
                arrays["events"] = second["events"]
    executor.release()  # the workers exit while the statistics are written
    if "sample" in count:
        arrays["sample_indices"], arrays["sample"] = _sample(specs, counts, window, documents,
                                                             plan["attention_windows"], seed)
    final = _with_sources(settings, hashed)
    manifest = {key: final[key] for key in ("sources", "window", "documents", "vocab_size", "tokenizer", "groups")}
    manifest.update(tokens=n_tokens, windows=total_windows, counted=list(count),
                    settings={"k": k, "tokens": "given" if given is not None else "chosen",
                              "prefix_labels": prefix_labels, "attention_windows": plan["attention_windows"],
                              "seed": seed})
    write_stats(folder, arrays, manifest)
    shutil.rmtree(work)


def _groups_plan(groups: dict[str, list[int]] | None, block_tokens: int) -> dict | None:
    """The word groups as the plan records them (None when none are counted)."""
    if groups is None:
        return None
    return {"block_tokens": int_in_range("block_tokens", block_tokens, 1),
            "words": {word: [int(t) for t in ids] for word, ids in groups.items()}}


def _unit_tokens(unit_tokens: int | None, total_windows: int, window: int, workers: int) -> int:
    """Tokens per unit: as given, or an equal share of the corpus per worker, at most :data:`UNIT_TOKENS`."""
    unit_tokens = int(unit_tokens or min(UNIT_TOKENS, max(1 << 20, -(-total_windows // workers) * window)))
    if not 1 <= unit_tokens <= MAX_UNIT_TOKENS:
        raise InputError(f"unit_tokens must be in 1..{MAX_UNIT_TOKENS}, got {unit_tokens}")
    return unit_tokens


def _vocab_size(vocab_size: int | None, tokenizer) -> int:
    """V as given, else the tokenizer's."""
    if vocab_size is None:
        if tokenizer is None:
            raise InputError("give the tokenizer the corpus was tokenized with, or vocab_size")
        vocab_size = tokenizer.vocab_size
    return int_in_range("vocab_size", vocab_size, 1)


def _check_budget(count: tuple[str, ...], n_tracked: int, prefix_labels: int, vocab_size: int, workers: int,
                  max_bytes: int | None) -> None:
    """Refuse a count whose dense pieces, held by every worker at once (prefix counts in float64,
    next-token rows in int64), would pass ``max_bytes`` (TooLargeError), before anything starts."""
    n_labels = max(prefix_labels, n_tracked) if "prefix" in count else 0
    entries = ("prefix" in count) * n_tracked * n_labels * n_tracked + ("next" in count) * n_tracked * vocab_size
    check_dense_size((workers, entries), max_bytes, f"count on {workers} worker(s)",
                     "count fewer tokens (k, --tokens), labels or workers")


def _tokenizer_of(specs: list[SourceSpec], tokenizer) -> dict | None:
    """The identity of the tokenizer (:func:`~ctxstair.corpus.stats.tokenizer_identity`), checked against
    the records that ``ctxstair corpus tokenize`` leaves next to its shards (:data:`RECORD_SUFFIX`):
    shards of different tokenizers, or of another tokenizer than the one given, are refused."""
    given = tokenizer_identity(tokenizer)
    recorded = {}
    for spec in specs:
        record = Path(spec.path).with_suffix(RECORD_SUFFIX)
        if record.is_file():
            recorded[record.name] = json.loads(record.read_text()).get("tokenizer")
    names = list(recorded)
    for name in names[1:]:
        if recorded[name] != recorded[names[0]]:
            raise InputError(f"the shards were tokenized with different tokenizers: {names[0]} and {name} record "
                             "different vocabularies")
    if names and given is not None and recorded[names[0]] != given:
        raise InputError(f"{names[0]} records another tokenizer than the one given (vocabulary sha256 "
                         f"{recorded[names[0]]['vocab_sha256'][:12]}, given {given['vocab_sha256'][:12]})")
    return given if given is not None else (recorded[names[0]] if names else None)


def _check_count(count) -> tuple[str, ...]:
    names = tuple(count.split(",")) if isinstance(count, str) else tuple(count)
    unknown = [name for name in names if name not in COUNTABLE]
    if unknown or not names:
        raise InputError(f"unknown statistics {', '.join(unknown) or '(none)'}; allowed: {', '.join(COUNTABLE)}")
    return tuple(name for name in COUNTABLE if name in names)


def _choice(value: str, allowed: tuple[str, ...], name: str) -> str:
    if value not in allowed:
        raise InputError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _open_sources(paths, window: int, documents: str, dtype, column, text_ok: bool
                  ) -> tuple[list[SourceSpec], list[int]]:
    """The specs of every source (folders expanded) and their window counts."""
    from ctxstair.corpus.sources import open_sources

    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not paths:
        raise InputError("no sources given")
    text = [str(p) for p in paths if Path(p).suffix in (".txt", ".text", ".jsonl", ".ndjson", ".json")]
    if text:
        raise InputError(f"{text[0]} is text: tokenize it first (ctxstair corpus tokenize FILES --tokenizer T --out "
                         "PREFIX), then count PREFIX.idx")
    specs, counts = [], []
    for source in open_sources(paths, dtype=dtype, column=column, text_ok=text_ok):
        specs.append(SourceSpec(str(source.path), source.kind, str(source.dtype) if source.kind == "flat" else None,
                                getattr(source, "column", None)))
        counts.append(windows(source, window, documents).n_windows)
    return specs, counts


def _describe(spec: SourceSpec) -> dict:
    """A source as the manifest records it: its description and each file's size and SHA-256."""
    source = open_source(spec.path, kind=spec.kind, dtype=spec.dtype, column=spec.column, text_ok=True)  # checked
    files = [{"name": Path(file).name, "bytes": Path(file).stat().st_size, "sha256": _sha256(Path(file))}
             for file in source.files()]
    return {**source.describe(), "files": files}


def _with_sources(settings: dict, described: Future) -> dict:
    """The plan of a count: its ``settings`` and its sources, described and hashed (waiting for the hashes)."""
    return {"sources": described.result(), **settings}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 23):
            digest.update(block)
    return digest.hexdigest()


def _write_plan(folder: Path, plan: dict) -> None:
    atomic_write_text(folder / WORK / "plan.json", json.dumps(plan, indent=2) + "\n")


def _same_plan(folder: Path, plan: dict) -> None:
    """A count is resumed only with the same sources (sizes and hashes) and settings; one killed before
    it recorded its plan has recorded no unit either, and starts afresh."""
    file = folder / WORK / "plan.json"
    if not file.is_file():
        if (folder / WORK).is_dir():
            return
        raise InputError(f"{folder} is a complete statistics directory; use --force to count it again")
    recorded = json.loads(file.read_text())
    differ = [key for key in plan if key != "unit_tokens" and recorded.get(key) != plan[key]]
    if differ:
        raise InputError(f"{folder} is a count of other sources or settings ({', '.join(differ)} differ); "
                         "use --force to replace it")


def _sum_units(job: Job, units: list[Unit], work: Path, executor: Executor, bar: Progress,
               before_record: Callable[[], None] = lambda: None) -> dict:
    """Count the units not yet done and sum every unit's arrays, each as soon as its file is written
    (while the workers count the others); integer sums do not depend on the order. An array is summed
    in its unit dtype where no entry can reach that dtype's limit (an entry counts some of the
    ``positions`` counted): the int32 rows of a count of fewer than 2^31 tokens are summed without
    an int64 copy of each (400 MB at the defaults; the statistics file reads them back as int64)."""
    total, sparse = {}, {}
    positions = sum(unit.stop - unit.first for unit in units) * job.window

    def add(unit: Unit) -> None:
        arrays = load_file(str(work / f"{unit.name}.safetensors"))
        for name in [name for name in arrays if name.endswith(".keys")]:
            base = name.removesuffix(".keys")
            sparse.setdefault(base, []).append((arrays.pop(name), arrays.pop(f"{base}.counts")))
        for name, a in arrays.items():
            if name in total:
                total[name] += a
            else:
                # the loaded array (or its int64 copy) is this sum's own
                total[name] = a if np.iinfo(a.dtype).max >= positions else a.astype(np.int64)

    def done(unit: Unit) -> None:
        before_record()
        atomic_write_text(work / f"{unit.name}.json", json.dumps({"unit": unit.__dict__}) + "\n")
        add(unit)
        bar.update((unit.stop - unit.first) * job.window)

    todo = []
    for unit in units:
        if (work / f"{unit.name}.json").is_file():  # counted by an earlier, interrupted run
            add(unit)
            bar.update((unit.stop - unit.first) * job.window, done_before=True)
        else:
            todo.append(unit)
    executor.run(job, todo, work, done)
    for base, parts in sparse.items():
        total[f"{base}.keys"], total[f"{base}.counts"] = sum_sparse(parts)
    return total


def _group_arrays(first: dict[str, np.ndarray], n_rows: int, vocab_size: int) -> dict[str, np.ndarray]:
    """The word-group pairs, summed with keys ``(block · rows + row) · V + next``, as the statistics
    file's ``groups.block``, ``groups.row``, ``groups.next``, ``groups.counts`` and ``has_next``."""
    keys = first["groups.keys"]
    block_row, nxt = np.divmod(keys, vocab_size)
    block, row = np.divmod(block_row, n_rows)
    return {"groups.block": block, "groups.row": row, "groups.next": nxt, "groups.counts": first["groups.counts"],
            "has_next": first["has_next"]}


def _csr(rows: np.ndarray) -> dict[str, np.ndarray]:
    """Dense (T, V) counts as the CSR arrays of the statistics file."""
    indptr, indices, counts = csr_parts(rows)
    return {"next_rows.indptr": indptr, "next_rows.indices": indices, "next_rows.counts": counts}


def _sample(specs, counts, window, documents, n, seed) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` windows of a seeded permutation of all windows (corpus order), and their indices."""
    chosen = np.random.default_rng(seed).permutation(sum(counts))[:n]
    starts = np.cumsum([0, *counts])
    sample = np.empty((chosen.size, window), dtype=np.int64)
    for row, index in enumerate(chosen):
        source = int(np.searchsorted(starts, index, side="right")) - 1
        local = int(index - starts[source])
        sample[row] = window_index(specs[source], window, documents).read(local, local + 1)[0]
    return chosen.astype(np.int64), sample

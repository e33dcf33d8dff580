"""``ctxstair analyze-model``: the LM staircase measurement (:mod:`ctxstair.measure.staircase`, SPEC §6.4, §7)
of every checkpoint of a source (:mod:`ctxstair.checkpoints`: a Hugging Face folder, a folder of
its checkpoints, a GGUF file, an LM run of ours, revisions of a Hub model), one checkpoint at a time.

The corpus side is built once (:func:`text_setup`: a text tokenised with the source's tokenizer, cut
into non-overlapping windows; or, for our own LM runs, the run's training windows,
:func:`ctxstair.measure.staircase.run_setup`). Each checkpoint is then read, measured whole — ρ_next and
the probe on its embedding rows, the attention paths and path shares on its network when its family
has a view (:mod:`ctxstair.models.view`) — and let go, so a long series never sits in memory. Each
checkpoint's probe is fitted on
its own, the arithmetic of the live monitor.

With an output folder (``--out``) each checkpoint's row is written atomically as it finishes
(``checkpoints/<name>.json`` and its embedding rows of T in ``checkpoints/<name>.npz``, next to
``series.json``, the settings); a resumed analysis reads the finished checkpoints back instead of
measuring them again, and refuses a folder made with other settings. At the end
:func:`write_result` adds ``analysis.json`` (every row, in the one schema of
:mod:`ctxstair.measure.schema`) and ``similarity.npz`` (``S^next`` and the last checkpoint's ``S^emb``), which
the report draws (:func:`ctxstair.report.lm_figures.analysis_figure`).

A series must not plot one model state as another: :func:`series_checks` hashes every checkpoint's
embedding (SHA-256 of the matrix alone, :func:`ctxstair.checkpoints.base.embedding_sha256`),
flags a checkpoint whose embedding equals an earlier one's (a duplicate of it) or, for a Hub
model, ``main``'s (other than the repository's last step, which is ``main`` by right), and records
the hashes, the flags, the tokenizer comparison and the vocabulary padding in ``series.json`` and
``analysis.json`` (``checks``). Flagged checkpoints keep their rows but are left out of the
curves unless ``keep_flagged``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import numpy as np

from ctxstair import rundir
from ctxstair.alignment.similarity import stacked_cosines
from ctxstair.checkpoints import NO_VIEW, Source
from ctxstair.checkpoints.base import embedding_sha256, read_json_file
from ctxstair.checks import int_in_range
from ctxstair.corpus import count as corpus_count
from ctxstair.errors import InputError
from ctxstair.io import atomic_save_npz, atomic_write_text
from ctxstair.measure.estimators import States
from ctxstair.measure.schema import MEASURES, split_key
from ctxstair.measure.staircase import StaircaseSettings, StaircaseSetup
from ctxstair.progress import Progress

#: The settings file of an analysis folder; a resumed analysis must match it.
SETTINGS_FILE = "series.json"
RESULT_FILE, SIMILARITY_FILE = "analysis.json", "similarity.npz"
CHECKPOINT_DIR = "checkpoints"
#: The defaults of ``analyze-model``'s corpus: tokens per window, and at most this many tokens.
WINDOW, MAX_TOKENS = corpus_count.WINDOW, 2_000_000


def text_setup(source: Source, text: str, settings: StaircaseSettings, window: int = WINDOW,
               max_tokens: int = MAX_TOKENS) -> StaircaseSetup:
    """The setup of a corpus text for a source: tokenised with the source's tokenizer, cut to
    ``max_tokens`` tokens and into non-overlapping windows of ``window`` tokens (the tail dropped).
    InputError if the corpus uses an id the embedding matrix has no row for, or has fewer than 4
    word-like tokens."""
    from ctxstair.text.windows import make_windows

    window = int_in_range("window", window, 2)
    max_tokens = int_in_range("max_tokens", max_tokens, 2 * window)
    ids = source.tokenizer.encode(text, max_tokens=max_tokens)
    # Embedding matrices may be padded beyond the tokenizer, and tokenizers may list special tokens
    # beyond the matrix; only the ids the corpus actually uses need a row.
    if ids.size and ids.max() >= source.vocab_rows:
        raise InputError(f"the corpus uses token id {ids.max()}, but the embedding matrix has only "
                         f"{source.vocab_rows} rows")
    return StaircaseSetup.from_windows(make_windows(ids, window), source.tokenizer, settings,
                                       vocab_size=source.vocab_rows)


def series_settings(identity: dict, corpus: dict, settings: StaircaseSettings) -> dict:
    """What ``series.json`` holds and a resumed analysis must match: the source
    (:func:`ctxstair.checkpoints.source_identity`),
    the corpus (its name and the SHA-256 of its text, window and token limit, or the run's own
    windows) and the measurement settings."""
    return json.loads(json.dumps({**identity, "corpus": corpus, "settings": settings.to_dict()}))


def corpus_record(name: str, text: str | None, window: int, max_tokens: int) -> dict:
    """The corpus part of :func:`series_settings`: a text by name and SHA-256, or (``text`` None) the
    training windows of the LM run being analysed."""
    if text is None:
        return {"name": name, "windows": "the run's training windows"}
    return {"name": name, "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "window": window,
            "max_tokens": max_tokens}


def check_same_series(settings: dict) -> Callable[[Path], None]:
    """A check for :func:`ctxstair.io.claim_output`: InputError unless a folder holds an analysis with
    ``settings``, naming the first setting that differs."""

    def same(folder: Path) -> None:
        file = folder / SETTINGS_FILE
        if not file.is_file():
            raise InputError(f"{folder} holds no {SETTINGS_FILE}: not an analysis to resume")
        stored = rundir.read_json(folder, SETTINGS_FILE)  # an object, or one line naming the damaged file
        differing = next((key for key in settings if stored.get(key) != settings[key]), None)
        if differing is not None:
            raise InputError(f"{folder} holds an analysis with {differing} = {stored.get(differing)!r}, not "
                             f"{settings[differing]!r}: resume it with its own settings, or use another --out")

    return same


def write_settings(settings: dict) -> Callable[[Path], None]:
    """The ``start`` of :func:`ctxstair.io.claim_output`: a new analysis folder begins with ``series.json``."""
    return lambda folder: atomic_write_text(folder / SETTINGS_FILE, json.dumps(settings, indent=2) + "\n")


def analyze(source: Source, setup: StaircaseSetup, folder: Path | None = None,
            on_row: Callable[[dict, bool], None] | None = None,
            progress: Callable[[str], None] | None = None, keep_flagged: bool = False) -> dict:
    """Measure every checkpoint of ``source`` against ``setup`` (module docstring).

    Args:
        source: the checkpoints (:func:`ctxstair.checkpoints.open_checkpoints`).
        setup: the corpus side; its ``vocab_size`` must be the source's embedding rows.
        folder: an output folder already claimed (``series.json`` in it): each checkpoint's row is
            written there as it finishes, and rows finished before are read back. None: nothing is
            written.
        on_row: called with each checkpoint's row and whether it was read back.
        progress: called with one line before each checkpoint is read, and with what was read. (The
            checkpoints measured, with rate and time left, are reported on stderr inside
            :func:`ctxstair.progress.shown`, as the command line does.)
        keep_flagged: keep the checkpoints :func:`series_checks` flags in the curves (recorded).

    Returns:
        dict: ``source``; ``setup`` (:meth:`StaircaseSetup.record`); ``sample_window`` (tokens of each
        window of the path sample: the corpus's window, or the model's positions when fewer; None
        without the paths); ``paths_skipped`` (why the attention-path and path-share measures are
        missing, None when they are not); ``checkpoints``:
        one row per checkpoint, ``name`` and ``step`` with the measures of :mod:`ctxstair.measure.schema`
        (and where a Hub revision's weights came from); ``similarity`` (not JSON): ``next`` (T, T)
        ``S^next`` and ``embedding`` (T, T) the last checkpoint's ``S^emb``; ``checks``
        (:func:`series_checks`).
    """
    V, entries = source.vocab_rows, source.entries()
    paths = setup.settings.paths and source.positions is not None
    skipped = None if not setup.settings.paths or paths else (source.no_model or f"{NO_VIEW}: no model")
    rows, last = [], None
    with Progress(len(entries), f"analyze-model {source.name}", "checkpoint") as bar:
        for number, entry in enumerate(entries, 1):
            finished = None if folder is None else _finished(folder, entry.name, setup.tokens.size)
            if finished is None:
                if progress is not None:
                    progress(f"[{number}/{len(entries)}] {entry.name}: reading and measuring")
                row, W = _measure(entry, setup, V, paths, progress)
                why = row.pop("no_model", None)
                skipped = skipped or why
                if folder is not None:
                    _write_checkpoint(folder, entry.name, row, W)
            else:
                row, W = finished
            if on_row is not None:
                on_row(row, finished is not None)
            rows.append(row)
            last = W
            bar.set_postfix(done=entry.name)
            bar.update(1, done_before=finished is not None)
    similarity = {"next": setup.next_cosines(V), "embedding": stacked_cosines(last[None])[0]}
    window = min(setup.sample.shape[1], source.positions) if paths else None
    return {"source": source.name, "setup": setup.record(), "sample_window": window, "paths_skipped": skipped,
            "checkpoints": rows, "similarity": similarity, "checks": series_checks(source, rows, keep_flagged)}


def series_checks(source: Source, rows: list[dict], keep_flagged: bool = False) -> dict:
    """What a series records so that it cannot plot one model state as another (module docstring).

    Args:
        source: the checkpoints measured (a Hub source also hashes ``main`` when the series lacks it).
        rows: one per checkpoint in step order, each with ``name``, ``step`` and ``embedding_sha256``
            (None for a row finished by a version that did not hash).
        keep_flagged: recorded: whether the flagged checkpoints stay in the curves.

    Returns:
        JSON-ready dict: ``embedding_sha256`` (name -> hash); ``main`` (``checked`` and ``sha256``, or
        ``why`` it was not); ``last_step`` (the step whose embedding may equal ``main``'s);
        ``flagged`` (name -> the reasons, a list of lines); ``keep_flagged``; ``tokenizer`` (its
        hash and what was found of each other revision's or checkpoint folder's: Hub models, folders
        of checkpoints); ``embedding_rows``,
        ``tokenizer_size`` and ``padding_rows`` (rows beyond the tokenizer, which no text uses).
    """
    from ctxstair.checkpoints.hub import DEFAULT_REVISION, HubSource

    hashes = {row["name"]: row.get("embedding_sha256") for row in rows}
    hub = isinstance(source, HubSource)
    if not hub:
        main, digest, last = {"checked": False, "why": "not a Hugging Face Hub model: no main revision"}, None, None
    else:
        digest, why = (hashes[DEFAULT_REVISION], None) if DEFAULT_REVISION in hashes else source.main_embedding_sha256()
        main = {"checked": True, "sha256": digest} if digest is not None else {
            "checked": False, "why": why or f"{DEFAULT_REVISION} was finished before embeddings were hashed"}
        last = source.last_step()
    flagged: dict[str, list[str]] = {}
    first_with: dict[str, str] = {}
    for row in rows:
        name, own = row["name"], hashes[row["name"]]
        if own is None or (hub and name == DEFAULT_REVISION):
            continue
        if own == digest:  # main's embedding belongs to the last step alone; the others are mis-served
            if row["step"] != last:
                flagged.setdefault(name, []).append(
                    f"its embedding is byte-identical to {DEFAULT_REVISION}'s, yet it is not the last step ({last})")
        elif own in first_with:
            flagged.setdefault(name, []).append(f"its embedding is byte-identical to {first_with[own]}'s")
        else:
            first_with[own] = name
    size = source.tokenizer.vocab_size
    checks = getattr(source, "tokenizer_checks", None)  # Hub series and folders of checkpoints
    tokenizer = ({"sha256": source.tokenizer_sha256, "revisions": checks} if checks is not None else
                 {"checked": False, "why": "one tokenizer serves every checkpoint of this source"})
    return {"embedding_sha256": hashes, "main": main, "last_step": last, "flagged": flagged,
            "keep_flagged": bool(keep_flagged), "tokenizer": tokenizer, "embedding_rows": source.vocab_rows,
            "tokenizer_size": size, "padding_rows": max(0, source.vocab_rows - size)}


# long: the checks and the order (refuse, open, set up, claim, measure, write) are the command's contract
def analyze_model(model: str | os.PathLike, corpus: str | None = None, *, text: str | None = None,
                  stats: str | os.PathLike | None = None, run_windows: str | os.PathLike | None = None,
                  window: int = WINDOW,
                  max_tokens: int = MAX_TOKENS, revisions: str | None = None, out: str | os.PathLike | None = None,
                  resume: bool = False, force: bool = False, keep_flagged: bool = False, evict_measured: bool = False,
                  on_start: Callable[[Source, StaircaseSetup], None] | None = None,
                  on_row: Callable[[dict, bool], None] | None = None, progress: Callable[[str], None] | None = None,
                  finish: Callable[[Path], None] | None = None, **settings) -> dict:
    """``ctxstair analyze-model`` as one call: open the source, build the setup, measure every checkpoint.

    Args:
        model: a checkpoint source (:func:`ctxstair.checkpoints.open_checkpoints`): a Hugging Face
            folder, a folder of checkpoints, a GGUF file, ``smollm2``, an LM run of ours, or a Hub
            model id ``org/name``.
        corpus: the corpus (:func:`ctxstair.text.corpora.load_text`: ``synthetic``, a fetched name, a
            file or folder); None for an LM run of ours: its own training windows, and then the
            settings of its own analysis (its config's ``analysis`` section) unless given here.
        text: the corpus's text itself instead (``corpus`` then only names it).
        stats: a statistics directory (``ctxstair corpus count``) instead of a corpus: its counts and
            window sample, counted with the model's tokenizer for these settings (statistics of another
            tokenizer are refused before any weight is read).
        run_windows: an LM run directory of ours whose training windows and analysis settings are
            used instead of a corpus, as for the run itself: its exported model
            (``RUN/hf_model``, :mod:`ctxstair.lm.export`) then gives the run's own numbers.
        window, max_tokens: the corpus's windows (:func:`text_setup`).
        revisions: Hub model only: ``step0,step1000`` or ``log:N``
            (:func:`ctxstair.checkpoints.hub.parse_revisions`).
        out, resume, force: the output folder and its rule (:func:`ctxstair.io.claim_output`): each
            checkpoint written as it finishes, finished ones read back on ``resume``, an existing one
            replaced with ``force`` once the new analysis is complete. Refused before anything is read.
        keep_flagged: keep flagged checkpoints in the curves (:func:`series_checks`).
        evict_measured: Hub model only: delete each revision this run downloaded from the Hugging Face cache
            once its row exists (measured, or read back on ``resume``), and ``main`` at the end when it was
            read only for the series checks (:class:`ctxstair.checkpoints.hub.CacheEviction`).
        on_start: called with the source and the setup before the first checkpoint is read.
        on_row, progress: as :func:`analyze`.
        finish: called with the output folder once ``analysis.json`` is written, before the folder is
            complete (the command line draws the figure there).
        settings: fields of :class:`StaircaseSettings` that differ from the defaults (``k``,
            ``attention_windows``, ``probe``...).

    Returns:
        :func:`analyze`'s dict, with ``corpus``.
    """
    from ctxstair.checkpoints import open_checkpoints, source_identity
    from ctxstair.checkpoints.hub import DEFAULT_REVISION, CacheEviction, hub_id, parse_revisions
    from ctxstair.io import check_output, claim_output
    from ctxstair.measure.staircase import run_setup, settings_of
    from ctxstair.run import Run
    from ctxstair.text.corpora import load_text

    if resume and force:
        raise InputError("resume continues the analysis in the output folder and force replaces it: pass one of them")
    if resume and out is None:
        raise InputError("resume needs an output folder: the folder of the analysis to continue")
    repo_id = hub_id(model)
    if repo_id is None and revisions is not None:
        raise InputError(f"revisions are for a Hugging Face Hub model id (org/name that is not an existing path), "
                         f"not {model}")
    if repo_id is None and evict_measured:
        raise InputError(f"evicting measured revisions from the Hugging Face cache is for a Hub model id, not {model}")
    names = None if repo_id is None else parse_revisions(repo_id, revisions)
    if stats is not None and (corpus is not None or text is not None):
        raise InputError("give a corpus or a statistics directory, not both")
    own = corpus is None and text is None and stats is None
    if run_windows is not None and not own:
        raise InputError("give the training windows of a run, a corpus or a statistics directory: one of them")
    windows_of = model if run_windows is None else run_windows
    if own and rundir.directory_kind(windows_of) != rundir.LM_RUN:
        raise InputError(f"{windows_of} is not an LM run directory of ours: give a corpus" if run_windows is not None
                         else f"a corpus is needed for {model}: only an LM run directory of ours brings its own")
    settings = dataclasses.replace(settings_of(Run(windows_of).config) if own else StaircaseSettings(), **settings)
    if stats is not None:
        from ctxstair.corpus import read_stats

        stats = read_stats(stats)
        record = {"stats": stats.manifest["sources"], "tokens": stats.manifest["tokens"], "window": stats.window}
    else:
        if text is None and not own:
            text = load_text(corpus)
        own_name = "the run's corpus" if run_windows is None else f"the training windows of {run_windows}"
        record = corpus_record(corpus or (own_name if own else "text"), text, window, max_tokens)
    stored = series_settings(source_identity(model, names), record, settings)
    same = check_same_series(stored)
    if out is not None:
        check_output(out, resume=resume, force=force, same=same)
    eviction = CacheEviction(repo_id, progress) if evict_measured else None  # before this run downloads anything
    source = open_checkpoints(model, names)
    if stats is not None:
        # Opening a source reads its tokenizer, never its weights (a GGUF file's embedding is read on
        # demand): statistics of another tokenizer are refused before the model is read.
        stats.check_tokenizer(source.tokenizer)
        setup = StaircaseSetup.from_stats(stats, settings, tokenizer=source.tokenizer, vocab_size=source.vocab_rows)
    elif text is None:
        setup = run_setup(Run(windows_of), settings)
    else:
        setup = text_setup(source, text, settings, window, max_tokens)
    if on_start is not None:
        on_start(source, setup)
    output = None if out is None else claim_output(out, resume=resume, force=force, start=write_settings(stored),
                                                   same=same)
    result = analyze(source, setup, None if output is None else output.path,
                     on_row if eviction is None else eviction.after(on_row), progress, keep_flagged)
    if eviction is not None and DEFAULT_REVISION not in names:  # read by the series checks alone
        eviction.evict(DEFAULT_REVISION)
    result["corpus"] = record
    if output is not None:
        # The checks join the settings once known; a resumed analysis compares only the settings.
        write_settings({**stored, "checks": result["checks"]})(output.path)
        write_result(output.path, result)
        if finish is not None:
            finish(output.path)
        output.commit()
    return result


def _measure(entry, setup: StaircaseSetup, V: int, paths: bool,
             progress: Callable[[str], None] | None) -> tuple[dict, np.ndarray]:
    """One checkpoint's row and its embedding rows of T (T, d) float64."""
    checkpoint = entry.load(paths)
    if progress is not None and "read" in checkpoint.info:
        progress(f"    {entry.name}: read {checkpoint.info['read']} ({checkpoint.info['weights']}), "
                 f"shape {checkpoint.W_E.shape}")
    if checkpoint.W_E.shape[0] != V:
        raise InputError(f"checkpoint {entry.name} has {checkpoint.W_E.shape[0]} embedding rows, unlike the "
                         f"{V} of its source: not one series")
    W = checkpoint.W_E[setup.tokens].astype(np.float64)
    row = {"name": entry.name, "step": entry.step,
           **{k: v for k, v in checkpoint.info.items() if k != "read"},
           "embedding_sha256": embedding_sha256(checkpoint.W_E),
           **setup.measure(States(V, W[None], model=lambda i: checkpoint.model), paths=paths)[0]}
    if paths and checkpoint.model is None:
        row["no_model"] = checkpoint.no_model
    return row, W


def write_result(folder: Path, result: dict) -> None:
    """``analysis.json`` (the result without its similarity arrays; NaN as null) and ``similarity.npz``
    in ``folder``, each atomically."""
    rundir.write_json(folder, RESULT_FILE, {key: value for key, value in result.items() if key != "similarity"})
    atomic_save_npz(folder / SIMILARITY_FILE, result["similarity"])


def _checkpoint_file(name: str, suffix: str) -> str:
    # Quoted so that any checkpoint name (a branch may hold "/") is one file name.
    return f"{CHECKPOINT_DIR}/{quote(name, safe='')}{suffix}"


def _write_checkpoint(folder: Path, name: str, row: dict, W: np.ndarray) -> None:
    """A finished checkpoint: its embedding rows first, then its row (NaN as null), whose file marks it
    finished."""
    atomic_save_npz(folder / _checkpoint_file(name, ".npz"), {"embedding_rows": W})
    rundir.write_json(folder, _checkpoint_file(name, ".json"), row)


def _finished(folder: Path, name: str, n_tokens: int) -> tuple[dict, np.ndarray] | None:
    """The row and embedding rows of a checkpoint finished in an earlier run, or None when it is not."""
    row_file, rows_file = folder / _checkpoint_file(name, ".json"), folder / _checkpoint_file(name, ".npz")
    if not (row_file.is_file() and rows_file.is_file()):
        return None
    row = read_json_file(row_file)
    W = rundir.read_npz(folder, _checkpoint_file(name, ".npz"), keys=("embedding_rows",))["embedding_rows"]
    if not isinstance(row, dict) or row.get("name") != name or W.shape[0] != n_tokens:
        raise InputError(f"{row_file} is not the result of checkpoint {name} for this analysis")
    # null in JSON is an undefined measure: NaN, as the measurement returned it
    return {key: float("nan") if value is None and split_key(key)[0] in MEASURES else value
            for key, value in row.items()}, W

"""What the explorer of a language-model output shows (SPEC §7, §8 F7), computed from its files.

Three outputs hold the LM staircase measures (:mod:`ctxstair.report.lm_series`, one reader for
all): an LM run directory, an ``analyze-model --out`` folder (a *series*: of an LM run, of a folder
of checkpoints, of Hub revisions) and a Hugging Face Trainer output measured by ``ctxstair.monitor``.
Each gets one page:

* over the model states (steps, or the checkpoints in order when some state has no step): every
  measure the output holds — ρ_next (Pearson and Spearman), the prefix probe against its shuffled
  control, the attention-path correlation of each layer against its permutation null, the path
  shares of the embedding update, the unembedding alignment — and the training and held-out
  losses where the output logged them;
* per state, where the embeddings are at hand: the cosine matrix and the PCA pictures
  (:func:`ctxstair.alignment.pca.pca_paths`) of the embedding rows of the word groups of SPEC §7
  (numbers, weekdays, months, ...: the built-in corpus's ``SYNTHETIC_GROUPS``), each word a single
  token as written or capitalised. An LM run's snapshots, a series' ``checkpoints/<name>.npz``
  (the rows of the tokens it analysed: group words among them) and a Trainer output's
  ``checkpoint-<step>`` folders give them; a Trainer output's slider also stops at the steps the
  monitor measured between checkpoints, where the latest checkpoint at or before the step is shown
  and the panel's title says which. When fewer than :data:`MIN_WORDS` group words are found, the
  most frequent analysed tokens stand in (an LM run's ``lm_tokens.json``, a series' or the
  monitor's tokens), or, for a run trained without analysis, the tokenizer's first word-like tokens
  (a BPE's merges come in order of frequency). Without embeddings (a Trainer output without
  checkpoints, a series folder written before it kept each checkpoint's rows) the page says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np

from ctxstair import rundir
from ctxstair.alignment.pca import pca_paths
from ctxstair.alignment.similarity import stacked_cosines
from ctxstair.analysis.lm_staircase import OUTPUT as LM_ANALYSIS
from ctxstair.analysis.lm_staircase import TOKENS_FILE
from ctxstair.errors import InputError
from ctxstair.measure.schema import (
    ATTENTION_CORR,
    ATTENTION_NULL,
    PATH_SHARE,
    PROBE,
    RHO_NEXT,
    RHO_NEXT_SPEARMAN,
    SHUFFLED,
    UNEMBEDDING_ALIGNMENT,
)
from ctxstair.report.explorer.run_data import MAX_LOSS_POINTS, report_link, rounded, series
from ctxstair.report.lm_series import StaircaseSeries, read_series, run_losses
from ctxstair.report.typeset import typeset
from ctxstair.run import Run
from ctxstair.semantics.structure import word_tokens
from ctxstair.text.synthetic import SYNTHETIC_GROUPS
from ctxstair.text.tokenizer import TextTokenizer

#: Fewer group words than this and the most frequent eligible tokens are shown instead.
MIN_WORDS = 4
#: How many of the most frequent eligible tokens stand in for the word groups.
FREQUENT_TOKENS = 40
#: The file ``ctxstair.monitor``'s Trainer callback writes (its settings and tokens).
MONITOR_FILE = "staircase_monitor.json"


@dataclass
class Geometry:
    """The embedding rows a page shows: ``words`` (n,), their ``token_ids`` (n,), ``groups`` (slices of
    ``words``), ``steps`` (G,) the positions of the states that have them and ``E`` (G, n, d)."""

    words: list[str]
    token_ids: np.ndarray
    groups: list[dict]
    steps: list[int]
    E: np.ndarray


def lm_payload(directory: str | Path, page_dir: str | Path | None = None) -> dict:
    """The data of the page of an LM run, a series or a Trainer output (module docstring);
    ``page_dir``: the directory the page goes to (default ``directory``), which its links are
    relative to.

    Returns:
        JSON-ready dict: ``kind`` "lm", ``title``, ``lead`` (HTML), ``unit`` ("step", or
        "checkpoint" when some state has no step), ``xlog`` (a log x axis), ``times`` (S,) the
        slider's positions, ``labels`` (S,) what the slider's label says of each; the geometry
        (None when there is none, and ``geometry_note`` says why): ``words`` (n,), their
        ``token_ids`` (n,) and ``groups`` (``name``, ``start``, ``end``: slices of ``words``),
        ``S_emb`` (G, n, n), ``pca`` (``fixed``, ``procrustes``: (G, n, 2)), ``frame`` (S,) the
        geometry state shown at each position and ``frame_labels`` (G,); ``panels`` (curve panels:
        ``id``, ``title``, ``ylabel``, ``log``, ``traces`` of ``name``, ``x``, ``y``); ``ticks``
        (the states' names on a checkpoint axis), ``report``.

    Raises:
        InputError: an LM run without snapshots or ``tokenizer.json``; an output without measures.
    """
    directory = Path(directory)
    kind = rundir.directory_kind(directory)
    reader = {rundir.SERIES: _series_parts, rundir.TRAINER: _trainer_parts}.get(kind, _run_parts)
    title, staircase, times, names, geometry, note = reader(directory)
    unit = "step" if staircase is None or staircase.steps is not None else "checkpoint"
    payload = {
        "kind": "lm", "unit": unit, "xlog": unit == "step", "title": title,
        "lead": typeset("Move the slider or press play: " + (
            "the embeddings at that state (PCA and cosines), and " if geometry is not None else "") +
            "where the state sits on ρ_next — the alignment of the embeddings with the next-token signatures "
            "(SPEC §7, docs/science.md) — and on the other measures."),
        "times": [int(t) for t in times], "labels": names,
        "ticks": names if unit == "checkpoint" else None,
        "panels": _panels(staircase, directory if kind == rundir.LM_RUN else None),
        "report": report_link(directory, page_dir or directory),
        **_geometry_payload(geometry, times, note),
    }
    return payload


def _geometry_payload(geometry: Geometry | None, times: list[int], note: str | None) -> dict:
    if geometry is None:
        return {"words": None, "token_ids": None, "groups": None, "S_emb": None, "pca": None, "frame": None,
                "frame_labels": None, "geometry_note": note}
    E = geometry.E.astype(np.float64)
    paths = pca_paths(E)
    # each position shows the latest state with embeddings at or before it (the first before any)
    frame = [max([j for j, s in enumerate(geometry.steps) if s <= t] or [0]) for t in times]
    return {"words": geometry.words, "token_ids": geometry.token_ids.tolist(), "groups": geometry.groups,
            "S_emb": rounded(stacked_cosines(E)),
            "pca": {"fixed": rounded(paths["fixed"]), "procrustes": rounded(paths["procrustes"])},
            "frame": frame, "frame_labels": [int(s) for s in geometry.steps], "geometry_note": note}


# --- the three outputs: (title, series, slider positions, their labels, geometry, note) ---------------------


def _run_parts(run_dir: Path) -> tuple:
    """An LM run: its snapshots are the states, each with its embeddings."""
    times = rundir.snapshot_times(run_dir)
    if not times:
        raise InputError(f"{run_dir} has no snapshots to explore (was it trained with --no-analysis?)")
    if not (run_dir / "tokenizer.json").is_file():
        raise InputError(f"{run_dir / 'tokenizer.json'} not found: is {run_dir} a language-model run directory?")
    tokenizer = TextTokenizer.load(run_dir / "tokenizer.json")
    if (run_dir / TOKENS_FILE).is_file():
        frequent = np.asarray(rundir.read_json(run_dir, TOKENS_FILE, keys=("tokens",))["tokens"][:FREQUENT_TOKENS])
        name = "most frequent tokens"
    else:  # trained with --no-analysis: no token counts; a BPE's merges come in order of frequency
        ids = np.arange(tokenizer.vocab_size)
        frequent, name = ids[tokenizer.word_like(ids)][:FREQUENT_TOKENS], "the tokenizer's first word-like tokens"
    words, groups, ids = word_groups(lambda word: word_tokens(tokenizer, word), frequent.astype(np.int64),
                                     tokenizer.token_string, name, run_dir)
    run = Run(run_dir)
    key = run.config.model.embedding_key()  # W_E under the name its model family gives it
    E = np.stack([run.snapshot(t)[key].numpy()[ids] for t in times])  # (S, n, d)
    staircase = read_series(run_dir) if (run_dir / LM_ANALYSIS).is_file() else None
    config = rundir.read_yaml(run_dir, "config.yaml") if (run_dir / "config.yaml").is_file() else {}
    config = config if isinstance(config, dict) else {}
    corpus = (config.get("corpus") or {}).get("source", "a corpus")
    # Never the directory's name: a run is built under a temporary name, and the same files must give the same page.
    title = f"{config.get('recipe', 'language model')} on {corpus}: the embeddings over training"
    labels = [f"step {t}" + (" (initialization)" if t == 0 else "") for t in times]
    return title, staircase, times, labels, Geometry(words, groups=groups, token_ids=ids, steps=times, E=E), None


def _series_parts(folder: Path) -> tuple:
    """An ``analyze-model`` folder: its checkpoints are the states; their embedding rows of the
    analysed tokens are in ``checkpoints/<name>.npz``."""
    staircase = read_series(folder)
    positions = staircase.steps if staircase.steps is not None else np.arange(len(staircase.names))
    steps = [None] * len(positions) if staircase.steps is None else [int(s) for s in staircase.steps]
    tokens = [None] * len(positions) if staircase.tokens is None else list(staircase.tokens)
    labels = [_state_label(*state) for state in zip(staircase.names, steps, tokens)]
    setup = staircase.extra["setup"]
    files = [folder / "checkpoints" / f"{quote(name, safe='')}.npz" for name in staircase.names]
    geometry, note = None, None
    if all(file.is_file() for file in files):
        analysed = np.asarray(setup["tokens"], dtype=np.int64)
        strings = [str(s) for s in setup.get("token_strings") or [str(t) for t in analysed]]
        lookup = {string.strip(): int(token) for token, string in zip(analysed, strings)}
        position = {int(token): i for i, token in enumerate(analysed)}
        words, groups, ids = word_groups(
            lambda word: [lookup[s] for s in dict.fromkeys((word, word.capitalize())) if s in lookup],
            analysed[:FREQUENT_TOKENS], lambda t: strings[position[int(t)]], "most frequent analysed tokens", folder)
        rows = [rundir.read_npz(folder, f"checkpoints/{file.name}", keys=("embedding_rows",))["embedding_rows"]
                for file in files]
        E = np.stack([r[[position[int(t)] for t in ids]] for r in rows])
        geometry = Geometry(words, ids, groups, [int(p) for p in positions], E)
    else:
        # no path in the page: the same files give the same bytes wherever they lie
        note = ("The embedding geometry is not available: this folder keeps no embedding rows for "
                f"{', '.join(f.stem for f in files if not f.is_file())} (checkpoints/<name>.npz; a folder written "
                "before analyze-model kept them).")
    source = staircase.source
    source = Path(source).name if Path(source).is_absolute() else source  # no machine path in the page
    title = f"analyze-model series of {source}: {len(staircase.names)} checkpoints"
    return title, staircase, positions, labels, geometry, note


def _state_label(name: str, step: int | None, tokens: float | None) -> str:
    """What the slider's label says of a series' state: its step and name, and the tokens seen."""
    label = name if step is None or name == f"step {step}" else f"step {step} ({name})"
    return label + (f" · {_count(tokens)} tokens seen" if tokens is not None else "")


def _count(number: float) -> str:
    """A count in a few digits: 4.2B, 350M."""
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if number >= size:
            return f"{number / size:.3g}{suffix}"
    return str(int(number))


def _trainer_parts(directory: Path) -> tuple:
    """A Trainer output measured by the monitor: its measured steps and its checkpoints are the states."""
    from ctxstair.checkpoints.hf_folder import HFFolderSource, checkpoint_folders

    staircase = read_series(directory)
    saved = checkpoint_folders(directory)
    with_model = [(step, folder) for step, folder in saved if (folder / "config.json").is_file()]
    geometry, note = None, None
    if with_model:
        source = HFFolderSource(directory)
        tokenizer = source.tokenizer
        monitor = rundir.read_json(directory, MONITOR_FILE) if (directory / MONITOR_FILE).is_file() else {}
        analysed = np.asarray((monitor.get("monitor") or {}).get("tokens") or [], dtype=np.int64)
        if analysed.size == 0:
            ids = np.arange(tokenizer.vocab_size)
            analysed = ids[tokenizer.word_like(ids)]
        words, groups, ids = word_groups(lambda word: word_tokens(tokenizer, word), analysed[:FREQUENT_TOKENS],
                                         tokenizer.token_string, "most frequent analysed tokens", directory)
        E = np.stack([entry.load(False).W_E[ids] for entry in source.entries() if entry.step is not None])
        geometry = Geometry(words, ids, groups, [step for step, _ in with_model], E)
    else:
        note = ("The embedding geometry is not available: this Trainer output has no checkpoint-<step> folder with a "
                "saved model (the Trainer's save_strategy), and the monitor logs numbers, not embeddings.")
    times = sorted({int(s) for s in staircase.steps} | {step for step, _ in with_model})
    measured = {int(s) for s in staircase.steps}
    labels = [f"step {t}" + ("" if t in measured else " (a checkpoint; not measured live)") for t in times]
    model = f" ({rundir.read_json(with_model[-1][1], 'config.json').get('model_type')})" if with_model else ""
    return (f"Trainer output{model} measured by ctxstair.monitor: {len(staircase.names)} measured steps",
            staircase, times, labels, geometry, note)


def word_groups(spell: Callable[[str], list[int]], frequent: np.ndarray, token_string: Callable[[int], str],
                name: str, where: Path) -> tuple[list[str], list[dict], np.ndarray]:
    """(words, groups as slices of words, their token ids) of the module docstring: the group words that
    ``spell`` finds as one token (its ids, as written first), else the ``frequent`` tokens, one
    group called ``name``."""
    words, groups, ids, seen = [], [], [], set()
    for group_name, group in SYNTHETIC_GROUPS.items():
        start = len(words)
        for word in group.words:
            spellings = spell(word)
            if spellings and spellings[0] not in seen:
                seen.add(spellings[0])
                words.append(word)
                ids.append(spellings[0])
        if len(words) > start:
            groups.append({"name": group_name, "start": start, "end": len(words)})
    if len(words) >= MIN_WORDS:
        return words, groups, np.array(ids, dtype=np.int64)
    if frequent.size < 2:
        raise InputError(f"{where}: fewer than 2 word-like tokens to show")
    strings = [token_string(int(t)) for t in frequent]
    return strings, [{"name": name, "start": 0, "end": len(strings)}], frequent.astype(np.int64)


# --- the curves ---------------------------------------------------------------------------------------------


def _panels(staircase: StaircaseSeries | None, run_dir: Path | None) -> list[dict]:
    """The curve panels of every measure the output holds, ρ_next first and the losses last."""
    panels = [] if staircase is None else _measure_panels(staircase)
    loss, val_loss = run_losses(run_dir) if run_dir is not None else (
        (staircase.loss, staircase.val_loss) if staircase is not None else (None, None))
    if loss is not None or val_loss is not None:
        panels.append(_loss_panel(loss, val_loss))
    return panels


def _measure_panels(staircase: StaircaseSeries) -> list[dict]:
    def measured(measure: str, part: str = "", name: str | None = None, **style) -> dict:
        return {**series(name or measure, *staircase.measured(measure, part)), **style}

    panels = []
    if staircase.has(RHO_NEXT):
        panels.append({"id": "rho-next", "title": typeset("ρ_next: embeddings vs next-token signatures (SPEC §7)"),
                       "ylabel": "correlation (upper triangle)", "traces": [
                           measured(RHO_NEXT, name="ρ_next (Pearson)"),
                           measured(RHO_NEXT_SPEARMAN, name="ρ_next (Spearman)")]})
    if staircase.has(PROBE):
        panels.append({"id": "probe", "title": "Prefix probe: held-out MSE against its shuffled control",
                       "ylabel": "held-out MSE", "traces": [
                           measured(PROBE, name="prefix probe (held-out MSE)"),
                           measured(SHUFFLED, name="shuffled control", dash="dash")]})
    layers = staircase.layers()
    if layers:
        traces = []
        for j, layer in enumerate(layers):
            traces.append(measured(ATTENTION_CORR, layer, f"layer {layer}", colour=j))
            traces.append(measured(ATTENTION_NULL, layer, f"layer {layer}: permutation null", colour=j, dash="dot"))
        panels.append({"id": "attention-paths",
                       "title": typeset("Attention-path correlation per layer: corr(S(φ^{attn,ℓ}), S(W_O W_V w))"),
                       "ylabel": "correlation", "traces": traces})
    paths = staircase.paths()
    if paths:
        panels.append({"id": "path-shares", "title": "Path shares of the embedding update (SPEC §6.4)",
                       "ylabel": "share of the summed path norms",
                       "traces": [measured(PATH_SHARE, path, path) for path in paths]})
    if staircase.has(UNEMBEDDING_ALIGNMENT):
        panels.append({"id": "unembedding", "title": typeset("Unembedding alignment R_cos(W_U, φ^pre) (SPEC §7)"),
                       "ylabel": "correlation", "traces": [
                           measured(UNEMBEDDING_ALIGNMENT, name="R_cos(W_U, φ^pre)")]})
    return panels


def _loss_panel(loss: tuple | None, val_loss: tuple | None) -> dict:
    """The training loss (thinned to :data:`MAX_LOSS_POINTS`) and the held-out loss, over steps."""
    steps, values = loss if loss is not None else ([], [])
    if len(steps) > MAX_LOSS_POINTS:
        keep = np.unique(np.linspace(0, len(steps) - 1, MAX_LOSS_POINTS).round().astype(int))
        steps, values = np.asarray(steps)[keep], np.asarray(values)[keep]
    held_out = series("held-out loss", *val_loss) if val_loss is not None else series("held-out loss", [], [])
    return {"id": "losses", "title": "Next-token loss", "ylabel": "loss (nats, log scale)", "log": True,
            "traces": [series("training loss (batch)", steps, values), {**held_out, "markers": True}]}


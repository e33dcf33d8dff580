"""What the explorer of a language-model run shows (SPEC §7, §8 F7), computed from its files.

Over steps, from ``lm_analysis.csv`` and ``metrics.jsonl``: ρ_next (Pearson and
Spearman), the prefix probe against its shuffled control, the attention-path correlation of each
layer against its permutation null, the path shares of the embedding update, and the training and
held-out losses — each measure that the run's analysis wrote. Per snapshot: the cosine matrix and
the PCA pictures (:func:`ctxstair.alignment.pca.pca_paths`) of the embedding rows of the word
groups of SPEC §7 (numbers, weekdays, months, categories: the built-in corpus's
``SYNTHETIC_GROUPS``), each word a single token of the run's tokenizer as written or capitalised.
When fewer than :data:`MIN_WORDS` of them are single tokens, the run's most frequent eligible tokens
(``lm_tokens.json``) stand in, or, for a run trained without analysis, the tokenizer's first
word-like tokens (a BPE's merges come in order of frequency).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctxstair import rundir
from ctxstair.alignment.pca import pca_paths
from ctxstair.alignment.similarity import stacked_cosines
from ctxstair.analysis.lm_staircase import OUTPUT as LM_ANALYSIS
from ctxstair.analysis.lm_staircase import TOKENS_FILE, measure_series, read_lm_analysis
from ctxstair.errors import InputError
from ctxstair.lm.corpus import SYNTHETIC_GROUPS
from ctxstair.lm.schema import RHO_NEXT, RHO_NEXT_SPEARMAN
from ctxstair.lm.semantics import word_tokens
from ctxstair.lm.tokenizer import TextTokenizer
from ctxstair.report.explorer.run_data import MAX_LOSS_POINTS, report_link, rounded, series
from ctxstair.run import Run

#: Fewer group words than this and the most frequent eligible tokens are shown instead.
MIN_WORDS = 4
#: How many of the most frequent eligible tokens stand in for the word groups.
FREQUENT_TOKENS = 40


def lm_payload(run_dir: str | Path, page_dir: str | Path | None = None) -> dict:
    """The data of a language-model run's explorer page (module docstring); ``page_dir``: the
    directory the page goes to (default ``run_dir``), which its links are relative to.

    Returns:
        JSON-ready dict: ``kind`` "lm", ``title``, ``lead``, ``unit`` "step", ``times`` (S,),
        ``words`` (n,), their ``token_ids`` (n,) and ``groups`` (``name``, ``start``, ``end``: slices of ``words``),
        ``S_emb`` (S, n, n), ``pca`` (``fixed``, ``procrustes``: (S, n, 2)), ``panels`` (curve
        panels: ``id``, ``title``, ``ylabel``, ``log``, ``traces`` of ``name``, ``x``, ``y``),
        ``report`` (:func:`~ctxstair.report.explorer.run_data.report_link`).

    Raises:
        InputError: no snapshots or no ``tokenizer.json``.
    """
    run_dir = Path(run_dir)
    times = rundir.snapshot_times(run_dir)
    if not times:
        raise InputError(f"{run_dir} has no snapshots to explore (was it trained with --no-analysis?)")
    if not (run_dir / "tokenizer.json").is_file():
        raise InputError(f"{run_dir / 'tokenizer.json'} not found: is {run_dir} a language-model run directory?")
    words, groups, ids = _word_groups(run_dir, TextTokenizer.load(run_dir / "tokenizer.json"))
    run = Run(run_dir)
    key = run.config.model.embedding_key()  # W_E under the name its model family gives it
    E = np.stack([run.snapshot(t)[key].numpy()[ids] for t in times]).astype(np.float64)  # (S, n, d)
    paths = pca_paths(E)
    return {
        "kind": "lm", "unit": "step", "title": _title(run_dir),
        "lead": ("Move the slider or press play: the word groups' embeddings at that step (PCA and cosines), and "
                 "where the step sits on ρ_next — the alignment of the embeddings with the next-token signatures "
                 "(SPEC §7, docs/science.md) — and the other measures of the run."),
        "times": [int(t) for t in times], "words": words, "token_ids": ids.tolist(), "groups": groups,
        "S_emb": rounded(stacked_cosines(E)),
        "pca": {"fixed": rounded(paths["fixed"]), "procrustes": rounded(paths["procrustes"])},
        "panels": _panels(run_dir),
        "report": report_link(run_dir, page_dir or run_dir),
    }


def _title(run_dir: Path) -> str:
    """The page's title from the run's configuration (never the directory's name: a run is built under
    a temporary name, and the same files must give the same page)."""
    config = rundir.read_yaml(run_dir, "config.yaml") if (run_dir / "config.yaml").is_file() else {}
    config = config if isinstance(config, dict) else {}
    corpus = (config.get("corpus") or {}).get("source", "a corpus")
    return f"{config.get('recipe', 'language model')} on {corpus}: the embeddings over training"


def _word_groups(run_dir: Path, tokenizer: TextTokenizer) -> tuple[list[str], list[dict], np.ndarray]:
    """(words, groups as slices of words, their token ids) of the module docstring."""
    words, groups, ids, seen = [], [], [], set()
    for name, group in SYNTHETIC_GROUPS.items():
        start = len(words)
        for word in group.words:
            spellings = word_tokens(tokenizer, word)  # as written first, then capitalised
            token = spellings[0] if spellings else None
            if token is not None and token not in seen:
                seen.add(token)
                words.append(word)
                ids.append(token)
        if len(words) > start:
            groups.append({"name": name, "start": start, "end": len(words)})
    if len(words) >= MIN_WORDS:
        return words, groups, np.array(ids, dtype=np.int64)
    if (run_dir / TOKENS_FILE).is_file():
        counted = rundir.read_json(run_dir, TOKENS_FILE, keys=("tokens",))["tokens"]
        tokens, name = np.asarray(counted[:FREQUENT_TOKENS]), "most frequent tokens"
    else:  # trained with --no-analysis: no token counts; a BPE's merges come in order of frequency
        ids = np.arange(tokenizer.vocab_size)
        tokens, name = ids[tokenizer.word_like(ids)][:FREQUENT_TOKENS], "the tokenizer's first word-like tokens"
    if tokens.size < 2:
        raise InputError(f"{run_dir}: fewer than 2 word-like tokens to show")
    tokens = tokens.astype(np.int64)
    strings = [tokenizer.token_string(int(t)) for t in tokens]
    return strings, [{"name": name, "start": 0, "end": len(strings)}], tokens


def _panels(run_dir: Path) -> list[dict]:
    """The curve panels of every measure the run's files hold, ρ_next first and the losses last."""
    panels = _analysis_panels(read_lm_analysis(run_dir)) if (run_dir / LM_ANALYSIS).is_file() else []
    panels.append(_loss_panel(rundir.read_metric_rows(run_dir)))
    return panels


def _analysis_panels(table: dict) -> list[dict]:
    def measured(measure: str, part: str = "", name: str | None = None, **style) -> dict:
        return {**series(name or measure, *measure_series(table, measure, part)), **style}

    panels = []
    if (table["measure"] == RHO_NEXT).any():
        panels.append({"id": "rho-next", "title": "ρ_next: embeddings vs next-token signatures (SPEC §7)",
                       "ylabel": "correlation (upper triangle)", "traces": [
                           measured(RHO_NEXT, name="ρ_next (Pearson)"),
                           measured(RHO_NEXT_SPEARMAN, name="ρ_next (Spearman)")]})
    if (table["measure"] == "probe_heldout_mse").any():
        panels.append({"id": "probe", "title": "Prefix probe: held-out MSE against its shuffled control",
                       "ylabel": "held-out MSE", "traces": [
                           measured("probe_heldout_mse", name="prefix probe (held-out MSE)"),
                           measured("probe_shuffled_mse", name="shuffled control", dash="dash")]})
    layers = sorted({p for m, p in zip(table["measure"], table["part"]) if m == "attention_path_corr"}, key=int)
    if layers:
        traces = []
        for j, layer in enumerate(layers):
            traces.append(measured("attention_path_corr", layer, f"layer {layer}", colour=j))
            traces.append(measured("attention_path_null", layer, f"layer {layer}: permutation null", colour=j,
                                   dash="dot"))
        panels.append({"id": "attention-paths", "title": "Attention-path correlation per layer, against its null",
                       "ylabel": "correlation", "traces": traces})
    parts = list(dict.fromkeys(p for m, p in zip(table["measure"], table["part"]) if m == "path_share"))
    if parts:
        panels.append({"id": "path-shares", "title": "Path shares of the embedding update (SPEC §6.4)",
                       "ylabel": "share of the summed path norms",
                       "traces": [measured("path_share", part, part) for part in parts]})
    return panels


def _loss_panel(rows: list[dict]) -> dict:
    train = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    if len(train) > MAX_LOSS_POINTS:
        train = [train[i] for i in np.unique(np.linspace(0, len(train) - 1, MAX_LOSS_POINTS).round().astype(int))]
    held_out = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    return {"id": "losses", "title": "Next-token loss", "ylabel": "loss (nats, log scale)", "log": True, "traces": [
        series("training loss (batch)", *map(np.array, zip(*train))) if train else series("training loss", [], []),
        {**(series("held-out loss", *map(np.array, zip(*held_out))) if held_out else series("held-out loss", [], [])),
         "markers": True}]}

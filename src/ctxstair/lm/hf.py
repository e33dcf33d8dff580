"""Input embeddings of existing language models, and the SPEC §7 measurements on them.

:func:`load_embeddings` reads the input-embedding matrix ``W_E`` (V, d) and the tokenizer of

* a Hugging Face causal-LM directory (``config.json`` + safetensors weights + ``tokenizer.json``),
  through ``transformers.AutoModelForCausalLM.from_pretrained(..., local_files_only=True)``;
* a folder of such checkpoints from one run (``checkpoint-<step>`` sub-folders), one per step (a
  model saved at the folder's top next to them is not read);
* a GGUF file, or the name of a fetched model (``smollm2``: SmolLM2-135M-Instruct, Q4_1, SPEC
  §10). The embedding tensor ``token_embd.weight`` is read and dequantised with ``gguf`` — the same
  routine ``transformers`` uses when it loads the whole model (identical values), without
  building the model — and the tokenizer comes from ``transformers`` (``gguf_file=``);
* an LM run directory of this project (``config.yaml``, ``tokenizer.json``,
  ``snapshots/step_XXXXXXXX.safetensors`` holding ``W_E``), one per snapshot.

With ``models=True`` (:func:`iter_checkpoints`) each checkpoint also carries the whole network as a
:class:`~ctxstair.models.DecoderLM` (float32) when it is a Llama-family model: a Hugging Face Llama
through :func:`ctxstair.models.decoder_hf.from_hf_weights` (grouped-query attention and tied
embeddings included), a Llama GGUF file through ``transformers``' own GGUF reader
(``load_gguf_checkpoint``: the tensors dequantised and the query/key rows un-permuted, as
``from_pretrained(gguf_file=...)`` does, without its ``accelerate`` requirement), and an LM run's
snapshot with its ``config.yaml``. Any other model (GPT-2, Qwen2 with its biases...) carries the
reason instead.

:func:`analyze_model` tokenises a corpus with the model's tokenizer and computes, per checkpoint,
ρ_next and the held-out prefix probe next to its shuffled baseline (:mod:`ctxstair.lm.analysis`)
and, for Llama-family models, the attention-path correlation per layer with its permutation null
and the path shares of the embedding update (SPEC §6.4, §7) on a fixed sample of windows. Its
parts — :func:`prepare_corpus` (once per run), :func:`embedding_measures` and :func:`path_measures`
(per checkpoint) — serve callers that get one checkpoint at a time (:mod:`ctxstair.lm.hub`).
Nothing is downloaded: every load is local. Nothing is unpickled and no code of the model folder
runs: weights are read from safetensors only — a folder holding only pickled
weights (``pytorch_model.bin``...) is refused before ``transformers`` sees it — and
``trust_remote_code`` is always False, so a folder whose config names custom code is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ctxstair.alignment.similarity import signature_cosine, stacked_cosines
from ctxstair.checks import int_in_range
from ctxstair.errors import InputError
from ctxstair.lm import analysis
from ctxstair.lm.tokenizer import TextTokenizer

if TYPE_CHECKING:
    from ctxstair.models import DecoderLM

_CHECKPOINT_DIR = re.compile(r"checkpoint-(\d+)")
_SNAPSHOT_FILE = re.compile(r"step_(\d{8})\.safetensors")
#: The input-embedding tensor of a GGUF file (llama.cpp naming, every architecture).
_GGUF_EMBEDDING = "token_embd.weight"
#: The weight files of a Hugging Face folder that ``from_pretrained`` reads without unpickling.
_SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
#: Suffixes of pickled weight files (``torch.save``), named in the refusal when no safetensors exist.
_PICKLED_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
#: Seed of the fixed sample of windows for the attention-path and path-share measures.
SAMPLE_SEED = 0
#: Path windows: the default number of sampled windows (their first tokens up to the model's
#: positions) on which the path shares are computed; see :func:`analyze_model`.
PATH_WINDOWS = 4
#: Attention windows: the default size of the sample for the attention-path correlation.
ATTENTION_WINDOWS = 32
#: Why the attention-path and path-share measures are missing for a model that is not Llama-family.
NEEDS_LLAMA = "the attention-path and path-share measures need a Llama-family model"


@dataclass(frozen=True)
class Checkpoint:
    """Input embeddings of one model state.

    Attributes:
        name: what it is (a directory, file or snapshot name).
        step: training step for checkpoints of a run, None for a single model.
        W_E: (V, d) input-embedding rows, float32 (float64 if stored so); V may exceed the
            tokenizer's vocabulary (padded embedding matrices).
        tokenizer: the model's tokenizer.
        model: with ``iter_checkpoints(..., models=True)``, the whole network as a float32
            :class:`~ctxstair.models.DecoderLM` in eval mode when it is a Llama-family model; else None.
        no_model: why ``model`` is None (None when it is not, or when models were not asked for).
    """

    name: str
    step: int | None
    W_E: np.ndarray
    tokenizer: TextTokenizer
    model: DecoderLM | None = None
    no_model: str | None = None


def load_embeddings(source: str | os.PathLike) -> list[Checkpoint]:
    """The checkpoints of ``source`` (module docstring), in step order.

    Args:
        source: a Hugging Face model directory, a folder of ``checkpoint-<step>`` directories, a
            ``.gguf`` file, a fetched model name (``smollm2``) or an LM run directory.

    Returns:
        one :class:`Checkpoint` for a single model, one per step (ascending) otherwise; all of
        them share one tokenizer.
    """
    return list(iter_checkpoints(source))


def iter_checkpoints(source: str | os.PathLike, models: bool = False) -> Iterator[Checkpoint]:
    """:func:`load_embeddings` one checkpoint at a time, so a long run never sits in memory whole.

    Args:
        source: as :func:`load_embeddings`.
        models: also build each checkpoint's :class:`~ctxstair.models.DecoderLM` (``model``) when it
            is a Llama-family model, else give the reason (``no_model``); see the module docstring.

    The source is resolved and checked on the first ``next()``; bad input raises InputError there.
    """
    path = _resolve(source)
    if path.is_file():
        if path.suffix != ".gguf":
            raise InputError(f"{path} is a file but not a GGUF model (.gguf)")
        model, why = _gguf_model(path) if models else (None, None)
        yield Checkpoint(path.name, None, _gguf_embeddings(path), _gguf_tokenizer(path), model, why)
    elif (path / "config.yaml").is_file() and (path / "snapshots").is_dir():
        yield from _run_snapshots(path, models)
    elif steps := sorted((int(m.group(1)), p) for p in path.iterdir()
                         if p.is_dir() and (m := _CHECKPOINT_DIR.fullmatch(p.name))):
        # A Trainer output folder may also hold the final model at its top: the checkpoints win,
        # since a folder is passed for the curve (the final model is usually the last checkpoint).
        tokenizer = _hf_tokenizer(steps[0][1], path)
        for step, folder in steps:
            W_E, model, why = _hf_model(folder, models)
            yield Checkpoint(folder.name, step, W_E, tokenizer, model, why)
    elif (path / "config.json").is_file():
        W_E, model, why = _hf_model(path, models)
        yield Checkpoint(path.name, None, W_E, _hf_tokenizer(path, path), model, why)
    else:
        raise InputError(f"{path} is neither a Hugging Face model directory (config.json), a folder of "
                         "checkpoint-<step> directories, nor an LM run directory (config.yaml, snapshots/)")


#: Keys of a checkpoint's row that only the attention-path and path-share measures fill.
PATH_KEYS = ("attention_path_corr", "attention_path_null", "path_share")


@dataclass(frozen=True)
class PreparedCorpus:
    """The corpus side of the SPEC §7 measurements (:func:`prepare_corpus`), computed once and shared
    by every checkpoint of a run, so that checkpoints can be measured one at a time.

    Attributes:
        windows: int64 (n, window) token ids, non-overlapping windows of the tokenised corpus.
        vocab_size: V, the rows of the embedding matrices it is measured against.
        k: the size of T asked for (T may be smaller: fewer word-like tokens occur).
        tokens: int64 (k',) the token set T, most frequent first.
        token_strings: the tokens' strings.
        S_next: (T, T) cosine matrix of the next-token signatures ``S^next``.
        labels: int64 prefix labels ν, or None without the probe.
        phi1: (T, Y, T) prefix signatures ``φ^{y;1}`` over ``labels`` and context T, or None.
        train_idx, heldout_idx: the probe's fixed split of T (indices into ``tokens``); empty without it.
    """

    windows: np.ndarray
    vocab_size: int
    k: int
    tokens: np.ndarray
    token_strings: list[str]
    S_next: np.ndarray
    labels: np.ndarray | None
    phi1: np.ndarray | None
    train_idx: np.ndarray
    heldout_idx: np.ndarray


# long: half of it is the docstring, which documents every setting and every field of the result
def analyze_model(
    source: str | os.PathLike,
    corpus_text: str,
    k: int = 200,
    window: int = 128,
    max_tokens: int = 2_000_000,
    probe: bool = True,
    paths: bool = True,
    attention_windows: int = ATTENTION_WINDOWS,
    path_windows: int = PATH_WINDOWS,
) -> dict:
    """The SPEC §7 measurements (and the §6.4 path shares) for every checkpoint of a model.

    The corpus is tokenised with the model's tokenizer, cut to ``max_tokens`` tokens and into
    non-overlapping windows of ``window`` tokens (the tail is dropped). Over the token set ``T`` =
    the ``k`` most frequent word-like tokens of the windows: next-token signatures (T, V) and, for
    the probe, prefix signatures ``φ^{y;1}`` over the labels :func:`~ctxstair.lm.analysis.prefix_labels`
    (``T`` and the most frequent tokens, 1000 in all) and context ``T``. The probe uses the fixed
    split :func:`~ctxstair.lm.analysis.token_split` (a quarter held out, seed 0) and the SPEC §3
    settings (Adam, lr 0.01, 300 steps). (:func:`prepare_corpus`, :func:`embedding_measures`.)

    With ``paths``, for a Llama-family model (:func:`iter_checkpoints` ``models=True``): a fixed
    sample of ``attention_windows`` windows (a permutation of all windows seeded with
    :data:`SAMPLE_SEED`, its first ones; each cut to the model's ``max_seq_len`` positions when
    ``window`` is longer) gives the attention-path correlation of every layer with its permutation
    null (:func:`~ctxstair.lm.analysis.attention_path_scores`, labels over all V), and the first
    ``path_windows`` of them the path shares of the embedding update
    (:func:`~ctxstair.lm.analysis.path_shares`), both in float32 like the LM runs. The path shares
    cost about ``n_layers`` backward passes per window (one vector-Jacobian product per path), so
    they get fewer windows than the attention paths, which cost one forward pass. For any other
    model these are None and ``paths["skipped"]`` says why. Deterministic.

    Args:
        source: as :func:`load_embeddings`.
        corpus_text: the text (e.g. :func:`ctxstair.lm.corpus.load_text`).
        k: size of the token set, >= 4 (SPEC §7: 200).
        window: tokens per window, >= 2.
        max_tokens: at most this many tokens of the corpus are used.
        probe: whether to fit the prefix probe and its baseline.
        paths: whether to compute the attention-path and path-share measures.
        attention_windows: windows in the attention-path sample, >= 1 (fewer if the corpus has fewer).
        path_windows: windows of that sample used for the path shares, >= 1 (at most ``attention_windows``).

    Returns:
        dict, JSON-ready except ``similarity``:
        ``source``; ``corpus`` (``tokens``, ``windows``, ``window``); ``k``; ``tokens`` (T ids) and
        ``token_strings``; ``prefix_labels`` (number of labels, None without probe);
        ``heldout_tokens`` (ids, [] without probe); ``paths``: None without ``paths``, else
        ``skipped`` (None, or why nothing was measured), ``sample`` (the sampled window indices),
        ``attention_windows``, ``path_windows``, ``window`` (tokens per sampled window), ``seed`` and
        ``null_permutations``; ``checkpoints``: one dict per checkpoint with ``name``, ``step``,
        ``rho_next_pearson``, ``rho_next_spearman``, ``rho_next_defined``, ``probe_heldout_mse`` and
        ``shuffled_heldout_mse`` (None without probe), ``attention_path_corr`` and
        ``attention_path_null`` (one float per layer) and ``path_share`` (path name -> share: ``embed``,
        ``attn.ℓ``, ``mlp.ℓ``), None where not measured; ``similarity``: ``next`` (T, T) ``S^next``
        and ``embedding`` (S, T, T) ``S^emb`` arrays.
    """
    k, window, max_tokens, attention_windows, path_windows = check_settings(k, window, max_tokens, attention_windows,
                                                                            path_windows)
    stream = iter_checkpoints(source, models=paths)
    first = next(stream)
    prepared = prepare_corpus(first.tokenizer, first.W_E.shape[0], corpus_text, k, window, max_tokens, probe)
    sample = measure = None
    if paths:
        positions = None if first.model is None else first.model.cfg.max_seq_len
        sample = path_sample(prepared.windows, positions, first.no_model, attention_windows, path_windows)
    if sample is not None and sample["skipped"] is None:
        attention_sample, shares_sample = sampled_windows(prepared.windows, sample)

        def measure(checkpoint: Checkpoint) -> dict:
            return path_measures(checkpoint.model, checkpoint.name, attention_sample, shares_sample,
                                 prepared.tokens, prepared.vocab_size)

    checkpoints, W = _token_embeddings(first, stream, prepared.tokens, measure)
    rows = [checkpoint_row(row, measured) for row, measured in zip(checkpoints, embedding_measures(prepared, W))]
    return assemble_result(str(source), prepared, sample, rows, W)


def check_settings(k: int, window: int, max_tokens: int, attention_windows: int,
                   path_windows: int) -> tuple[int, int, int, int, int]:
    """The settings of :func:`analyze_model` as ints, checked before any model is read: ``k`` >= 4,
    ``window`` >= 2, ``max_tokens`` >= 2 ``window``, both window counts >= 1 and ``path_windows`` at
    most ``attention_windows``; InputError naming the first that is not."""
    k = int_in_range(k, "k", 4)
    window = int_in_range(window, "window", 2)
    max_tokens = int_in_range(max_tokens, "max_tokens", 2 * window)
    attention_windows = int_in_range(attention_windows, "attention_windows", 1)
    path_windows = int_in_range(path_windows, "path_windows", 1)
    if path_windows > attention_windows:
        raise InputError(f"path_windows ({path_windows}) must not exceed attention_windows ({attention_windows}): "
                         "the path shares use the first windows of the attention-path sample")
    return k, window, max_tokens, attention_windows, path_windows


def prepare_corpus(tokenizer: TextTokenizer, vocab_size: int, corpus_text: str, k: int = 200, window: int = 128,
                   max_tokens: int = 2_000_000, probe: bool = True) -> PreparedCorpus:
    """Tokenise a corpus once for the SPEC §7 measurements of a run's checkpoints (:func:`analyze_model`).

    Args:
        tokenizer: the model's tokenizer.
        vocab_size: V, the rows of the model's embedding matrix (may exceed the tokenizer's vocabulary).
        corpus_text, k, window, max_tokens, probe: as :func:`analyze_model`.

    Returns:
        the :class:`PreparedCorpus`: windows, token set T, ``S^next`` and, with ``probe``, the prefix
        labels, signatures and split. InputError if the corpus uses an id >= V or has fewer than 4
        word-like tokens.
    """
    from ctxstair.lm.windows import make_windows
    from ctxstair.signatures import next_token_signature, prefix_signature

    k = int_in_range(k, "k", 4)
    window = int_in_range(window, "window", 2)
    max_tokens = int_in_range(max_tokens, "max_tokens", 2 * window)
    ids = tokenizer.encode(corpus_text, max_tokens=max_tokens)
    # Embedding matrices may be padded beyond the tokenizer, and tokenizers may list special tokens
    # beyond the matrix; only the ids the corpus actually uses need a row.
    if ids.size and ids.max() >= vocab_size:
        raise InputError(f"the corpus uses token id {ids.max()}, but the embedding matrix has only {vocab_size} rows")
    windows = make_windows(ids, window)
    tokens = _word_like_tokens(windows, tokenizer, vocab_size, k)
    S_next = signature_cosine(next_token_signature(windows, vocab_size, tokens=tokens))
    labels = phi1 = None
    train_idx = heldout_idx = np.zeros(0, dtype=np.int64)
    if probe:
        labels = analysis.prefix_labels(windows, tokens, vocab_size)
        phi1 = prefix_signature(windows, tokens, labels, tokens)
        train_idx, heldout_idx = analysis.token_split(tokens.size)
    return PreparedCorpus(windows, int(vocab_size), k, tokens, [tokenizer.token_string(int(t)) for t in tokens], S_next,
                          labels, phi1, train_idx, heldout_idx)


def embedding_measures(prepared: PreparedCorpus, W: np.ndarray) -> list[dict]:
    """ρ_next and the held-out prefix probe next to its shuffled baseline (SPEC §7) of embeddings ``W``.

    Args:
        prepared: the corpus (:func:`prepare_corpus`).
        W: float64 (S, T, d) embedding rows of ``prepared.tokens``, one slice per checkpoint; the probe
            fits every slice on its own, so a run may be measured all at once or one checkpoint at a time.

    Returns:
        one dict per checkpoint: ``rho_next_pearson``, ``rho_next_spearman``, ``rho_next_defined``,
        ``probe_heldout_mse`` and ``shuffled_heldout_mse`` (None without the probe).
    """
    rho = analysis.rho_next_against(W, prepared.S_next)
    probe_mse = shuffled_mse = [None] * len(W)
    if prepared.phi1 is not None:
        split = (prepared.train_idx, prepared.heldout_idx)
        probe_mse = analysis.prefix_probe(prepared.phi1, W, *split)["heldout_mse"].tolist()
        shuffled_mse = analysis.shuffled_baseline(prepared.phi1, W, *split)["heldout_mse"].tolist()
    return [{"rho_next_pearson": float(rho["pearson"][i]), "rho_next_spearman": float(rho["spearman"][i]),
             "rho_next_defined": bool(rho["defined"][i]), "probe_heldout_mse": probe_mse[i],
             "shuffled_heldout_mse": shuffled_mse[i]} for i in range(len(W))]


def checkpoint_row(row: dict, measured: dict) -> dict:
    """A checkpoint's row of :func:`analyze_model`: ``row`` (``name``, ``step``, the path measures when
    taken) with the :func:`embedding_measures` ``measured``, and None for the path measures not taken."""
    row = {**row, **measured}
    for key in PATH_KEYS:
        row.setdefault(key, None)
    return row


def assemble_result(source: str, prepared: PreparedCorpus, sample: dict | None, rows: list[dict],
                    W: np.ndarray) -> dict:
    """The result dict of :func:`analyze_model` from its parts: the ``paths`` record ``sample``
    (:func:`path_sample`), the checkpoints' ``rows`` (:func:`checkpoint_row`) and their embedding
    rows ``W`` (S, T, d) of ``prepared.tokens``."""
    windows = prepared.windows
    return {
        "source": source,
        "corpus": {"tokens": int(windows.size), "windows": int(windows.shape[0]), "window": int(windows.shape[1])},
        "k": prepared.k,
        "tokens": prepared.tokens.tolist(),
        "token_strings": prepared.token_strings,
        "prefix_labels": None if prepared.labels is None else int(prepared.labels.size),
        "heldout_tokens": prepared.tokens[prepared.heldout_idx].tolist(),
        "paths": sample,
        "checkpoints": rows,
        "similarity": {"next": prepared.S_next, "embedding": stacked_cosines(W)},
    }


def path_sample(windows: np.ndarray, positions: int | None, skipped: str | None, attention_windows: int,
                path_windows: int) -> dict:
    """The ``paths`` record of :func:`analyze_model`: the fixed sample of windows for the attention-path
    and path-share measures (SPEC §6.4, §7), or why they are skipped.

    Args:
        windows: int (n, window) the corpus windows.
        positions: the first checkpoint's ``max_seq_len`` (its model's positions), None when it has no model.
        skipped: why it has no model (None: not known, or it has one).
        attention_windows, path_windows: as :func:`analyze_model`.
    """
    record = {"skipped": skipped, "sample": [], "attention_windows": 0, "path_windows": 0, "window": 0,
              "seed": SAMPLE_SEED, "null_permutations": analysis.NULL_PERMUTATIONS}
    if positions is None:
        record["skipped"] = record["skipped"] or f"{NEEDS_LLAMA}: no model was loaded"
        return record
    chosen = np.random.default_rng(SAMPLE_SEED).permutation(windows.shape[0])[:attention_windows]
    record.update(sample=chosen.tolist(), attention_windows=int(chosen.size),
                  path_windows=int(min(path_windows, chosen.size)), window=int(min(windows.shape[1], positions)))
    return record


def sampled_windows(windows: np.ndarray, record: dict) -> tuple[np.ndarray, np.ndarray]:
    """The windows a :func:`path_sample` record names: (attention-path sample (n, t), path-share sample,
    its first rows)."""
    attention_sample = windows[record["sample"], : record["window"]]
    return attention_sample, attention_sample[: record["path_windows"]]


def path_measures(model: DecoderLM | None, name: str, attention_sample: np.ndarray, shares_sample: np.ndarray,
                  tokens: np.ndarray, V: int) -> dict:
    """``attention_path_corr``, ``attention_path_null`` (per layer) and ``path_share`` (per path) of one
    checkpoint's model (SPEC §6.4, §7) on the windows of :func:`sampled_windows`; None each when the
    checkpoint (named ``name``) has none. InputError when its model has fewer positions than the sample."""
    if model is None:
        return dict.fromkeys(PATH_KEYS)
    if attention_sample.shape[1] > model.cfg.max_seq_len:
        raise InputError(f"checkpoint {name} has only {model.cfg.max_seq_len} positions, fewer than the "
                         f"{attention_sample.shape[1]} of the first checkpoint's sample: not one run")
    scores = analysis.attention_path_scores(model, attention_sample, tokens, V)
    return {"attention_path_corr": [corr for _, corr, _ in scores],
            "attention_path_null": [null for _, _, null in scores],
            "path_share": analysis.path_shares(model, shares_sample, tokens)}


def _word_like_tokens(windows: np.ndarray, tokenizer: TextTokenizer, V: int, k: int) -> np.ndarray:
    """The token set of :func:`analyze_model`: the ``k`` most frequent word-like token ids of ``windows``;
    InputError if there are fewer than 4."""
    word_like = np.zeros(V, dtype=bool)
    n_known = min(tokenizer.vocab_size, V)
    word_like[:n_known] = tokenizer.word_like(np.arange(n_known))
    tokens = analysis.eligible_tokens(windows, word_like, k)
    if tokens.size < 4:
        raise InputError(f"the corpus has only {tokens.size} distinct word-like tokens; need at least 4")
    return tokens


def _token_embeddings(first: Checkpoint, rest: Iterator[Checkpoint], tokens: np.ndarray,
                      measure: Callable[[Checkpoint], dict] | None = None) -> tuple[list[dict], np.ndarray]:
    """One ``{"name", "step"}`` row per checkpoint (``first``, then ``rest``), extended by ``measure``'s
    dict when given (computed while the checkpoint is in memory), and their embedding rows of ``tokens``
    as float64 (S, T, d); InputError if a checkpoint's embeddings differ in shape from the first's."""
    checkpoints, W = [], []
    for checkpoint in chain([first], rest):
        if checkpoint.W_E.shape != first.W_E.shape:
            raise InputError(f"checkpoint {checkpoint.name} has embeddings of shape {checkpoint.W_E.shape}, "
                             f"unlike {first.name} {first.W_E.shape}: not one run")
        row = {"name": checkpoint.name, "step": checkpoint.step}
        if measure is not None:
            row.update(measure(checkpoint))
        checkpoints.append(row)
        W.append(checkpoint.W_E[tokens].astype(np.float64))
    return checkpoints, np.stack(W)


# --- sources ------------------------------------------------------------------------------------


def _resolve(source: str | os.PathLike) -> Path:
    """A fetched model name -> its GGUF file; otherwise the existing path ``source``."""
    from ctxstair.lm.corpus import SOURCES, files

    name = str(source)
    if name in SOURCES and SOURCES[name].kind == "model":
        return files(name)[0]  # InputError naming `ctxstair data fetch` when not fetched
    path = Path(name).expanduser()
    if not path.exists():
        models = ", ".join(n for n, s in SOURCES.items() if s.kind == "model")
        raise InputError(f"model {name!r} not found: not a path, nor a fetched model name ({models})")
    return path


def _run_snapshots(run: Path, models: bool) -> Iterator[Checkpoint]:
    """One checkpoint per ``snapshots/step_XXXXXXXX.safetensors`` of an LM run directory; with ``models``
    each carries the DecoderLM of ``config.yaml`` with the snapshot's weights (float32)."""
    from safetensors import safe_open

    steps = sorted((int(m.group(1)), p) for p in (run / "snapshots").iterdir()
                   if (m := _SNAPSHOT_FILE.fullmatch(p.name)))
    if not steps:
        raise InputError(f"{run / 'snapshots'} holds no step_XXXXXXXX.safetensors snapshot")
    tokenizer = TextTokenizer.load(run / "tokenizer.json")
    config, why = _run_config(run) if models else (None, None)
    for step, file in steps:
        model = None
        with safe_open(file, framework="pt") as snapshot:
            names = list(snapshot.keys())
            if "W_E" not in names:
                raise InputError(f"snapshot {file} has no W_E tensor")
            W_E = snapshot.get_tensor("W_E")
            if config is not None:
                state = {name: snapshot.get_tensor(name) for name in names}
                model, why = built_model(lambda: _run_decoder(config, state, file))  # noqa: B023 -- called at once
        yield Checkpoint(file.stem, step, weight_array(W_E), tokenizer, model, why)


def _run_config(run: Path) -> tuple[object | None, str | None]:
    """The LMConfig of an LM run's ``config.yaml``, or None and why it cannot be read."""
    from ctxstair.config import load_yaml
    from ctxstair.config.lm import LMConfig

    try:
        return load_yaml((run / "config.yaml").read_text(encoding="utf-8"), LMConfig), None
    except (OSError, UnicodeDecodeError, InputError) as error:
        return None, f"cannot rebuild the run's DecoderLM from {run / 'config.yaml'}: {first_line(error)}"


def _run_decoder(config, state: dict, file: Path) -> DecoderLM:
    """The float32 DecoderLM of an LM run's config with a snapshot's weights ``state``; InputError if
    the snapshot is not that model's whole state."""
    import torch

    from ctxstair.models import DecoderLM

    model = DecoderLM(config.decoder_config(vocab_size=state["W_E"].shape[0]))
    expected = model.state_dict()
    missing = [name for name in expected if name not in state]
    wrong = [name for name in expected if name in state and state[name].shape != expected[name].shape]
    if missing or wrong or len(state) != len(expected):
        example = (f"no {missing[0]}" if missing else f"{wrong[0]} of shape {tuple(state[wrong[0]].shape)}, not "
                   f"{tuple(expected[wrong[0]].shape)}" if wrong else "tensors the model does not have")
        raise InputError(f"snapshot {file.name} is not the whole state of the DecoderLM that config.yaml describes "
                         f"({len(missing)} tensors missing, {len(wrong)} of another shape; {example})")
    model.load_state_dict({name: tensor.to(torch.float32) for name, tensor in state.items()})
    return model.eval()


def built_model(build: Callable[[], DecoderLM]) -> tuple[DecoderLM | None, str | None]:
    """``(build(), None)``, or ``(None, why)`` when it raises InputError."""
    try:
        return build(), None
    except InputError as error:
        return None, str(error)


def _hf_model(folder: Path, models: bool) -> tuple[np.ndarray, DecoderLM | None, str | None]:
    """``get_input_embeddings().weight`` of the causal LM saved in ``folder`` and, with ``models``, the
    model as a float32 DecoderLM (or None and why: not Llama-family)."""
    import torch
    from transformers import AutoModelForCausalLM

    from ctxstair.models.decoder_hf import from_hf_weights

    _check_safe_weights(folder)
    with quiet_transformers():
        try:
            # use_safetensors=True: never fall back to pytorch_model.bin (a pickle), whatever the
            # transformers version; trust_remote_code=False: refuse (rather than prompt for) custom code.
            model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, use_safetensors=True,
                                                         trust_remote_code=False)
        except (OSError, ValueError, KeyError) as error:
            raise InputError(f"cannot load the model in {folder}: {first_line(error)}") from None
    W_E = weight_array(model.get_input_embeddings().weight)
    if not models:
        return W_E, None, None
    decoder, why = built_model(lambda: from_hf_weights(
        model.config, {name: tensor.detach().to(torch.float32) for name, tensor in model.state_dict().items()}))
    return W_E, decoder, None if why is None else f"{NEEDS_LLAMA}: {why}"


def _check_safe_weights(folder: Path) -> None:
    """InputError unless every weight file ``from_pretrained`` would read in ``folder`` is safetensors.

    Checked here, before ``transformers``, because what it reads depends on its version and on the
    folder: ``pytorch_model.bin`` when no safetensors exist (older versions unpickle it in full),
    the file named by ``transformers_weights`` in ``config.json``, or the shards of an index.
    Other pickles in the folder (a Trainer checkpoint's ``optimizer.pt``, ``training_args.bin``)
    are never read, so they do not matter.
    """
    config = read_json_file(folder / "config.json")
    named = config.get("transformers_weights") if isinstance(config, dict) else None
    if named is not None and not str(named).endswith((".safetensors", ".safetensors.index.json")):
        raise InputError(f"{folder / 'config.json'} names the weights file {named!r}, which is not safetensors; "
                         "ctxstair does not load pickled weights: convert the model to safetensors")
    weights = folder / (str(named) if named is not None else next(
        (name for name in _SAFE_WEIGHTS if (folder / name).is_file()), _SAFE_WEIGHTS[0]))
    if weights.name.endswith(".index.json") and weights.is_file():
        index = read_json_file(weights)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        shards = sorted({str(shard) for shard in weight_map.values()}) if isinstance(weight_map, dict) else []
        unsafe = [shard for shard in shards if not shard.endswith(".safetensors")]
        if not shards or unsafe:
            raise InputError(f"{weights} lists {'the shard ' + repr(unsafe[0]) if unsafe else 'no shards'}; "
                             "ctxstair loads safetensors shards only (pickled weights are never loaded)")
    elif not weights.is_file():
        pickled = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix in _PICKLED_WEIGHTS)
        if pickled:
            raise InputError(f"{folder / pickled[0]} holds pickled weights, which ctxstair does not load (unpickling "
                             "can run code); convert the model to safetensors (model.safetensors)")
        raise InputError(f"{folder} has no {weights.name}: ctxstair reads Hugging Face weights from safetensors only")


def read_json_file(file: Path) -> object:
    """The parsed JSON of ``file``; InputError naming it if unreadable."""
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"cannot read {file}: {first_line(error)}") from None


def _hf_tokenizer(folder: Path, fallback: Path) -> TextTokenizer:
    """The tokenizer in ``folder``, else in ``fallback`` (a run's folder above its checkpoints)."""
    return TextTokenizer.from_pretrained_dir(folder if (folder / "tokenizer.json").is_file() else fallback)


def _gguf_embeddings(file: Path) -> np.ndarray:
    """The dequantised ``token_embd.weight`` of a GGUF file, (V, d) float32."""
    import gguf

    try:
        reader = gguf.GGUFReader(file)
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read GGUF file {file}: {first_line(error)}") from None
    tensor = next((t for t in reader.tensors if t.name == _GGUF_EMBEDDING), None)
    if tensor is None:
        raise InputError(f"GGUF file {file} has no {_GGUF_EMBEDDING} tensor")
    return np.ascontiguousarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)


def _gguf_model(file: Path) -> tuple[DecoderLM | None, str | None]:
    """The Llama model of a GGUF file as a float32 DecoderLM, or None and why.

    ``transformers``' GGUF reader (``load_gguf_checkpoint``) gives the config and the tensors under
    Hugging Face names, dequantised and with the query/key rows of llama.cpp's RoPE layout put back,
    as ``from_pretrained(gguf_file=...)`` would (which also needs ``accelerate``); the name map is
    taken from a Llama model built on the ``meta`` device (no memory)."""
    import io

    import torch
    import transformers
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from ctxstair.models.decoder_hf import from_hf_weights

    # Its progress bar is a plain tqdm on stderr, not the transformers one quiet_transformers turns off.
    with quiet_transformers(), contextlib.redirect_stderr(io.StringIO()):
        try:
            config = load_gguf_checkpoint(str(file))["config"]
            if config.get("model_type") != "llama":
                return None, f"{NEEDS_LLAMA}: {file.name} holds a {config.get('model_type')!r} model"
            with torch.device("meta"):
                names = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
            tensors = load_gguf_checkpoint(str(file), return_tensors=True, model_to_load=names)["tensors"]
        except (OSError, ValueError, KeyError, TypeError, NotImplementedError) as error:
            return None, f"{NEEDS_LLAMA}, and the model in {file.name} cannot be read: {first_line(error)}"
    model, why = built_model(lambda: from_hf_weights(config, {name: t.to(torch.float32)
                                                               for name, t in tensors.items()}))
    return model, None if why is None else f"{NEEDS_LLAMA}: {why}"


def _gguf_tokenizer(file: Path) -> TextTokenizer:
    """The tokenizer stored in a GGUF file's metadata, rebuilt by ``transformers``."""
    from transformers import AutoTokenizer

    with quiet_transformers():
        try:
            # trust_remote_code=False: a tokenizer_config.json next to the file may name custom code.
            tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name, trust_remote_code=False)
        except (OSError, ValueError, KeyError) as error:
            raise InputError(f"cannot read the tokenizer of {file}: {first_line(error)}") from None
    return TextTokenizer.from_transformers(tokenizer)


def weight_array(weight) -> np.ndarray:
    """A torch weight as numpy: float32 and float64 as they are, other floats (bf16) as float32."""
    import torch

    weight = weight.detach().cpu()
    return (weight if weight.dtype in (torch.float32, torch.float64) else weight.float()).numpy()


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence ``transformers`` warnings and progress bars for one load, then restore them."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type name when the message is empty), for one-line errors."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]

"""Released checkpoint series on the Hugging Face Hub: the SPEC §7 measurements revision by revision.

A released training run (Pythia: ``step0, step1, step2, step4, ..., step512, step1000, ...,
step143000``; OLMo; others) is stored as the revisions (git branches) of one Hub repository.
:func:`parse_revisions` turns ``--revisions`` into a list of them (explicit names, or ``log:N``
chosen from the repository's ``step<N>`` refs, :func:`log_spaced`); :func:`prepare_series` tokenises
the corpus once, with the tokenizer of the first revision (used for every revision);
:func:`analyze_series` measures each revision in turn and returns what
:func:`ctxstair.lm.hf.analyze_model` returns for a folder of checkpoints.

Every file is resolved through ``huggingface_hub.hf_hub_download`` (:func:`revision_files`): it
downloads, with its own progress bars, when online, and reads the local cache when offline
(``HF_HUB_OFFLINE=1``). Only what a measurement needs is fetched and read. ρ_next and the prefix
probe need only the input embedding (:func:`read_input_embedding`): its parameter name comes from
the model built from the revision's config on the ``meta`` device (no weights, any
``AutoModelForCausalLM`` architecture), and the tensor is read with ``safetensors.safe_open`` from
``model.safetensors`` or from the one shard that ``model.safetensors.index.json`` names for it — the
model is never instantiated and the other shards are never fetched. Only a revision without any
safetensors is read from ``pytorch_model.bin`` (or its shard index), with PyTorch's restricted
unpickler ``torch.load(weights_only=True)``; the result says so (``weights``). The attention-path
and path-share measures need the whole network, so for a Llama-family config (those
:func:`ctxstair.models.decoder_hf.from_hf_weights` reads) and only then every weight file of the
revision is fetched (:func:`read_state`). ``trust_remote_code`` is always False.

With an output folder each revision's result is written atomically as it finishes
(``revisions/<revision>.json`` and the embedding rows of T in ``revisions/<revision>.npz``), next to
``series.json``, the settings; a resumed series reads finished revisions back instead of measuring
them again, and refuses a folder made with other settings.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import numpy as np

from ctxstair.errors import InputError
from ctxstair.io import atomic_save_npz, atomic_write_text
from ctxstair.lm.hf import (
    ATTENTION_WINDOWS,
    NEEDS_LLAMA,
    PATH_WINDOWS,
    PreparedCorpus,
    assemble_result,
    built_model,
    check_settings,
    checkpoint_row,
    embedding_measures,
    first_line,
    path_measures,
    path_sample,
    prepare_corpus,
    quiet_transformers,
    read_json_file,
    sampled_windows,
    weight_array,
)
from ctxstair.lm.tokenizer import TextTokenizer

#: A Hugging Face Hub model id, ``org/name``.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.\-]*/[A-Za-z0-9][\w.\-]*")
#: A revision that names its training step: ``step1000`` (Pythia), ``step1000-tokens4B`` (OLMo).
_STEP_REVISION = re.compile(r"step(\d+)(?![0-9])")
_LOG_SPEC = re.compile(r"log:(\d+)")
#: How a revision's weights were read (the ``weights`` of each result row).
SAFETENSORS = "safetensors"
PICKLE = "pickle (torch.load weights_only=True)"
#: The weight files looked for in a revision, in order of preference: (shard index, single file, how read).
_WEIGHT_FILES = (("model.safetensors.index.json", "model.safetensors", SAFETENSORS),
                 ("pytorch_model.bin.index.json", "pytorch_model.bin", PICKLE))
#: The revision analysed when none is named.
DEFAULT_REVISION = "main"


def hub_id(source: str | os.PathLike) -> str | None:
    """``source`` as a Hub model id (``org/name``), or None when it is an existing path or does not look
    like one (so a mistyped local path of more than two parts is reported as a missing path)."""
    name = str(source)
    if Path(name).expanduser().exists() or not _HUB_ID.fullmatch(name):
        return None
    return name


def revision_step(revision: str) -> int | None:
    """The training step a revision names (``step1000`` and ``step1000-tokens4B`` -> 1000), None for any
    other name (``main``)."""
    match = _STEP_REVISION.match(revision)
    return None if match is None else int(match.group(1))


def in_step_order(revisions: list[str]) -> list[str]:
    """``revisions`` sorted by step; names without one (``main``) after them in the order given.
    InputError on an empty or repeated name."""
    names = [str(revision).strip() for revision in revisions]
    if not names or "" in names:
        raise InputError(f"revisions must be non-empty names, got {revisions!r}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InputError(f"revision {repeated[0]!r} is listed twice")
    return sorted(names, key=lambda name: (revision_step(name) is None, revision_step(name) or 0))


def parse_revisions(repo_id: str, spec: str | None) -> list[str]:
    """The revisions ``--revisions`` names, in step order.

    Args:
        repo_id: the Hub model id (``org/name``).
        spec: None (the default revision, ``main``); ``log:N`` (:func:`log_spaced` over the repository's
            ``step<N>`` revisions, :func:`series_revisions`); or comma-separated names (``step0,step1000``).

    Returns:
        revision names, sorted by step (:func:`in_step_order`); InputError on a bad spec.
    """
    if spec is None:
        return [DEFAULT_REVISION]
    if match := _LOG_SPEC.fullmatch(spec.strip()):
        return log_spaced(series_revisions(repo_id), int(match.group(1)))
    if spec.strip().startswith("log:"):
        raise InputError(f"--revisions {spec!r}: write log:N with N >= 2 revisions, e.g. log:16")
    return in_step_order(spec.split(","))


def log_spaced(revisions: list[str], n: int) -> list[str]:
    """``n`` of a series' ``step<N>`` revisions, log-spaced in the step and always with the first and the last.

    Spacing is uniform in ``u = log(1 + step)``, so step 0 sits at u = 0 like any other step
    (no −∞) and is the first point when the series has it; the targets are ``n`` equal steps of u from
    the first revision's to the last's. Each target takes the revision nearest in u among those after
    the previous choice that leave enough for the targets still to come, so ``n`` distinct revisions
    come back (all of them when the series has at most ``n``): where the series is sparser than the
    targets (Pythia's ``step1 ... step512``) consecutive revisions are taken.

    Args:
        revisions: ``step<N>`` names (any order).
        n: how many, >= 2.

    Returns:
        the chosen names in step order.
    """
    if n < 2:
        raise InputError(f"log:{n} asks for fewer than the first and the last revision; use log:N with N >= 2")
    ordered = in_step_order(revisions)
    steps = [revision_step(name) for name in ordered]
    if None in steps:
        raise InputError(f"log-spacing needs step<N> revisions, got {ordered[steps.index(None)]!r}")
    if n >= len(ordered):
        return ordered
    u = np.log1p(np.array(steps, dtype=np.float64))
    targets = np.linspace(u[0], u[-1], n)
    chosen, low = [], 0
    for j, target in enumerate(targets):
        high = len(ordered) - n + j  # leaves one revision for each target after this one
        pick = low + int(np.argmin(np.abs(u[low: high + 1] - target)))
        chosen.append(ordered[pick])
        low = pick + 1
    return chosen


def series_revisions(repo_id: str) -> list[str]:
    """The ``step<N>`` revisions of a Hub repository in step order: its branches
    (``huggingface_hub.list_repo_refs``) when online, the refs of the local cache
    (``<hub cache>/models--ORG--NAME/refs/``) when offline (``HF_HUB_OFFLINE=1``)."""
    from huggingface_hub import constants, list_repo_refs
    from huggingface_hub.errors import RepositoryNotFoundError
    from huggingface_hub.file_download import repo_folder_name

    if constants.HF_HUB_OFFLINE:
        refs = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model") / "refs"
        names = [ref.name for ref in refs.iterdir() if ref.is_file()] if refs.is_dir() else []
        where = f"the local Hugging Face cache ({refs}; offline: HF_HUB_OFFLINE=1)"
    else:
        try:
            names = [branch.name for branch in list_repo_refs(repo_id).branches]
        except RepositoryNotFoundError as error:
            raise InputError(f"{repo_id} is not a model on the Hugging Face Hub that can be read: "
                             f"{first_line(error)}") from None
        except _connection_errors() as error:
            raise InputError(f"cannot list the revisions of {repo_id} on the Hugging Face Hub ({first_line(error)}); "
                             "set HF_HUB_OFFLINE=1 to use the revisions in the local cache") from None
        where = "its branches on the Hugging Face Hub"
    steps = [name for name in names if revision_step(name) is not None]
    if not steps:
        raise InputError(f"{repo_id} has no step<N> revisions in {where}: name them with --revisions")
    return in_step_order(steps)


def _connection_errors() -> tuple[type[BaseException], ...]:
    """What ``huggingface_hub`` raises when the Hub cannot be reached: OSError, and the HTTP client's
    base error, which is not one since it moved to httpx (``huggingface_hub.errors.HTTPError``)."""
    from huggingface_hub import errors

    return (OSError, getattr(errors, "HTTPError", OSError))


@dataclass(frozen=True)
class RevisionFiles:
    """One revision of a Hub model, resolved (:func:`revision_files`).

    Attributes:
        repo_id: ``org/name``.
        revision: the name asked for (``step1000``).
        commit: the commit it resolved to (every further file is fetched at this commit).
        folder: the snapshot folder in the local cache that holds its files.
        config: its ``transformers`` config.
    """

    repo_id: str
    revision: str
    commit: str
    folder: Path
    config: object


def revision_files(repo_id: str, revision: str) -> RevisionFiles:
    """Resolve ``revision`` of ``repo_id`` by fetching its ``config.json`` (downloaded when online,
    from the local cache when offline); InputError with one line when the repository, the revision
    or the file is not there (offline: not in the cache)."""
    from transformers import AutoConfig

    config_file = fetch(repo_id, revision, "config.json")
    folder = config_file.parent
    commit = folder.name if folder.parent.name == "snapshots" else revision
    with quiet_transformers():
        try:
            config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        except (OSError, ValueError, KeyError) as error:
            raise InputError(f"cannot read the config of {repo_id} at {revision}: {first_line(error)}") from None
    return RevisionFiles(repo_id, revision, commit, folder, config)


def fetch(repo_id: str, revision: str, filename: str, optional: bool = False) -> Path | None:
    """The local path of ``filename`` at ``revision`` through ``huggingface_hub.hf_hub_download``.

    With ``optional``, None when the repository has no such file (offline: when the cache has none);
    otherwise, and for a missing repository or revision or an unreachable Hub, InputError naming it."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"{filename} of {repo_id} at {revision}"
    try:
        return Path(hf_hub_download(repo_id, filename, revision=revision))
    except RepositoryNotFoundError as error:
        raise InputError(f"{repo_id} is not a model on the Hugging Face Hub that can be read (nor an existing path): "
                         f"{first_line(error)}") from None
    except RevisionNotFoundError:
        raise InputError(f"{repo_id} has no revision {revision!r} on the Hugging Face Hub") from None
    except LocalEntryNotFoundError as error:
        if constants.HF_HUB_OFFLINE:
            if optional:
                return None
            raise InputError(f"{where} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and "
                             "HF_HUB_OFFLINE=1 forbids downloading it") from None
        raise InputError(f"cannot fetch {where}: {first_line(error)}") from None
    except EntryNotFoundError:
        if optional:
            return None
        raise InputError(f"{repo_id} at {revision} has no {filename}") from None
    except _connection_errors() as error:
        raise InputError(f"cannot fetch {where}: {first_line(error)}") from None


def read_input_embedding(files: RevisionFiles) -> tuple[np.ndarray, str, str]:
    """The input-embedding matrix ``W_E`` of one revision, read alone (SPEC §7 needs nothing else).

    The parameter is ``get_input_embeddings().weight`` of the model built from the config on the
    ``meta`` device; its name, with or without the base model's prefix, is looked up in the weight
    files, and only the file holding it is fetched and read (``safe_open``: that tensor alone).

    Returns:
        ``(W_E, weights, where)``: (V, d) float32 (float64 if stored so; bf16 and fp16 as float32),
        :data:`SAFETENSORS` or :data:`PICKLE`, and ``"<tensor> in <file>"``. InputError if the
        revision has no weights holding it, or a shape other than the config's.
    """
    name, prefix, shape = _embedding_parameter(files.config)
    names = [name, name.removeprefix(f"{prefix}."), f"{prefix}.{name}"]
    weights, layout = _weight_layout(files)
    if isinstance(layout, dict):  # a shard index: only the shard that holds the tensor is fetched
        names = [stored for stored in names if stored in layout][:1]
        if not names:
            raise InputError(f"the weight index of {files.repo_id} at {files.revision} lists no {name}")
        layout = fetch(files.repo_id, files.commit, layout[names[0]])
    stored, tensor = _first_tensor(layout, weights, names)
    if stored is None:
        raise InputError(f"{layout.name} of {files.repo_id} at {files.revision} holds no {name}")
    if tuple(tensor.shape) != shape:
        raise InputError(f"{stored} of {files.repo_id} at {files.revision} has shape {tuple(tensor.shape)}, "
                         f"not the {shape} of its config")
    return weight_array(tensor), weights, f"{stored} in {layout.name}"


def read_state(files: RevisionFiles) -> dict:
    """Every tensor of one revision (name -> float32 torch tensor), for the measures that run the whole
    network: all its weight files are fetched (safetensors; pickles only when it has none, through
    the restricted loader)."""
    import torch

    weights, layout = _weight_layout(files)
    shards = [layout] if isinstance(layout, Path) else [fetch(files.repo_id, files.commit, shard)
                                                        for shard in sorted(set(layout.values()))]
    state = {}
    for file in shards:
        if weights == SAFETENSORS:
            from safetensors import safe_open

            with safe_open(file, framework="pt") as tensors:
                state.update({key: tensors.get_tensor(key) for key in tensors.keys()})  # noqa: SIM118 -- not a dict
        else:
            state.update(_unpickle(file))
    return {key: tensor.to(torch.float32) for key, tensor in state.items()}


def _weight_layout(files: RevisionFiles) -> tuple[str, dict[str, str] | Path]:
    """How the revision stores its weights: (:data:`SAFETENSORS` or :data:`PICKLE`, its shard index's
    ``weight_map`` (tensor -> shard file) or its single weight file, fetched). Safetensors are looked
    for first; InputError when it has neither."""
    for index_name, single_name, weights in _WEIGHT_FILES:
        index_file = fetch(files.repo_id, files.commit, index_name, optional=True)
        if index_file is not None:
            index = read_json_file(index_file)
            weight_map = index.get("weight_map") if isinstance(index, dict) else None
            if not isinstance(weight_map, dict) or not weight_map:
                raise InputError(f"{index_name} of {files.repo_id} at {files.revision} has no weight_map")
            return weights, {str(key): str(shard) for key, shard in weight_map.items()}
        single = fetch(files.repo_id, files.commit, single_name, optional=True)
        if single is not None:
            return weights, single
    names = ", ".join(name for pair in _WEIGHT_FILES for name in pair[:2])
    raise InputError(f"{files.repo_id} at {files.revision} has none of {names}")


def _first_tensor(file: Path, weights: str, names: list[str]) -> tuple[str | None, object]:
    """(name, tensor) of the first of ``names`` stored in one weight file; (None, None) when none is."""
    if weights == SAFETENSORS:
        from safetensors import safe_open

        with safe_open(file, framework="pt") as tensors:
            stored = next((name for name in names if name in tensors.keys()), None)  # noqa: SIM118 -- not a dict
            return stored, None if stored is None else tensors.get_tensor(stored)
    state = _unpickle(file)
    stored = next((name for name in names if name in state), None)
    return stored, state.get(stored)


def _embedding_parameter(config) -> tuple[str, str, tuple[int, ...]]:
    """(parameter name, base-model prefix, shape) of ``get_input_embeddings().weight`` of the causal LM of
    ``config``, built on the ``meta`` device: no memory, no weights."""
    import torch
    from transformers import AutoModelForCausalLM

    with quiet_transformers(), torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
        except (ValueError, KeyError, ImportError, TypeError) as error:
            raise InputError(f"cannot build a causal LM from the config {type(config).__name__}: "
                             f"{first_line(error)}") from None
    weight = model.get_input_embeddings().weight
    name = next(name for name, parameter in model.named_parameters() if parameter is weight)
    return name, model.base_model_prefix, tuple(weight.shape)


def _unpickle(file: Path) -> dict:
    """A pickled state dict through PyTorch's restricted unpickler (tensors and plain containers only,
    no code), memory-mapped so that only the tensors read are paged in."""
    import torch

    try:
        state = torch.load(file, weights_only=True, map_location="cpu", mmap=True)
    # Any failure means a file we will not read: torch raises UnpicklingError (without our importing
    # pickle, which the safe-loading check forbids) for anything beyond tensors, others for corrupt files.
    except Exception as error:
        raise InputError(f"cannot read the pickled weights {file.name} with torch.load(weights_only=True): "
                         f"{first_line(error)}") from None
    if not isinstance(state, dict):
        raise InputError(f"{file.name} holds a {type(state).__name__}, not a state dict")
    return state


# --- the series ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesPlan:
    """What :func:`analyze_series` measures (:func:`prepare_series`).

    Attributes:
        repo_id: ``org/name``.
        revisions: the revisions, in step order.
        embedding_shape: (V, d) of the first revision's input embedding, from its config; every
            revision must have it.
        prepared: the corpus, tokenised with the first revision's tokenizer (used for all).
        sample: the ``paths`` record (:func:`ctxstair.lm.hf.path_sample`): None without paths.
        settings: what ``series.json`` holds; a resumed series must match it.
    """

    repo_id: str
    revisions: list[str]
    embedding_shape: tuple[int, ...]
    prepared: PreparedCorpus
    sample: dict | None
    settings: dict


def series_settings(repo_id: str, revisions: list[str], corpus_text: str, corpus_name: str = "", k: int = 200,
                    window: int = 128, max_tokens: int = 2_000_000, probe: bool = True, paths: bool = True,
                    attention_windows: int = ATTENTION_WINDOWS, path_windows: int = PATH_WINDOWS) -> dict:
    """The settings of a series, checked before anything is fetched: what ``series.json`` holds and a
    resumed series must match (the measurement settings as :func:`ctxstair.lm.hf.analyze_model`;
    ``revisions`` in step order, the first one's tokenizer serving all; the corpus by ``corpus_name``
    and the SHA-256 of its text)."""
    k, window, max_tokens, attention_windows, path_windows = check_settings(k, window, max_tokens,
                                                                            attention_windows, path_windows)
    revisions = in_step_order(revisions)
    return {"model": repo_id, "revisions": revisions, "tokenizer_revision": revisions[0], "corpus": corpus_name,
            "corpus_sha256": hashlib.sha256(corpus_text.encode("utf-8")).hexdigest(), "k": k, "window": window,
            "max_tokens": max_tokens, "probe": bool(probe), "paths": bool(paths),
            "attention_windows": attention_windows, "path_windows": path_windows}


def prepare_series(settings: dict, corpus_text: str) -> SeriesPlan:
    """The corpus side of a series (:func:`series_settings`), once: the first revision's config and
    tokenizer are fetched and the corpus is tokenised with that tokenizer, which serves every revision
    (SPEC §7). The vocabulary size V comes from the config's embedding shape (no weights read). With
    ``paths`` the window sample is drawn when the config is Llama-family
    (:func:`ctxstair.models.decoder_hf.decoder_config_from_hf`), else the record says why not."""
    from ctxstair.models.decoder_hf import decoder_config_from_hf

    repo_id, revisions = settings["model"], settings["revisions"]
    first = revision_files(repo_id, revisions[0])
    tokenizer = TextTokenizer.load(fetch(repo_id, first.commit, "tokenizer.json"))
    shape = _embedding_parameter(first.config)[2]
    prepared = prepare_corpus(tokenizer, shape[0], corpus_text, settings["k"], settings["window"],
                              settings["max_tokens"], settings["probe"])
    sample = None
    if settings["paths"]:
        try:
            positions, why = decoder_config_from_hf(first.config, pretrained=True).max_seq_len, None
        except InputError as error:
            positions, why = None, f"{NEEDS_LLAMA}: {error}"
        sample = path_sample(prepared.windows, positions, why, settings["attention_windows"], settings["path_windows"])
    return SeriesPlan(repo_id, revisions, shape, prepared, sample, settings)


def check_series_folder(out: str | os.PathLike, settings: dict, resume: bool = False, force: bool = False) -> None:
    """InputError, before any work, when :func:`analyze_series` would refuse ``out``: it exists and
    neither ``resume`` nor ``force`` is given, or ``resume`` finds a folder made with other settings."""
    _series_folder(Path(out), settings, resume, force, create=False)


def analyze_series(plan: SeriesPlan, out: str | os.PathLike | None = None, resume: bool = False, force: bool = False,
                   on_revision: Callable[[dict, bool], None] | None = None,
                   progress: Callable[[str], None] | None = None) -> dict:
    """ρ_next, the held-out prefix probe and its baseline (SPEC §7) and, for Llama-family models, the
    attention paths and path shares (SPEC §6.4) of every revision of ``plan``, one revision at a time.

    Args:
        plan: from :func:`prepare_series`.
        out: folder for ``series.json`` and ``revisions/``; each revision's result is written there
            atomically as it finishes. None: nothing is written.
        resume: continue the series in ``out``: finished revisions are read back, not measured; a
            folder made with other settings is refused. Without it an existing ``out`` is refused unless
            ``force``, which removes it first.
        on_revision: called with each revision's row and whether it was read back (finished before).
        progress: called with one line before each revision is measured.

    Returns:
        the dict of :func:`ctxstair.lm.hf.analyze_model` (``source`` = the model id, one checkpoint per
        revision with ``name`` = the revision and ``step`` from ``step<N>``), each row also with
        ``commit`` and ``weights`` (:data:`SAFETENSORS` or :data:`PICKLE`), and ``tokenizer_revision``.
    """
    folder = None if out is None else _series_folder(Path(out), plan.settings, resume, force, create=True)
    rows, W = [], []
    for number, revision in enumerate(plan.revisions, 1):
        finished = None if folder is None else _finished(folder, revision, plan.prepared.tokens.size)
        if finished is None:
            if progress is not None:
                progress(f"[{number}/{len(plan.revisions)}] {revision}: fetching and measuring")
            row, rows_T = _measure_revision(plan, revision, progress)
            if folder is not None:
                _write_revision(folder, revision, row, rows_T)
        else:
            row, rows_T = finished
        if on_revision is not None:
            on_revision(row, finished is not None)
        rows.append(row)
        W.append(rows_T)
    result = assemble_result(plan.repo_id, plan.prepared, plan.sample, rows, np.stack(W))
    result["tokenizer_revision"] = plan.settings["tokenizer_revision"]
    return result


def _measure_revision(plan: SeriesPlan, revision: str,
                      progress: Callable[[str], None] | None) -> tuple[dict, np.ndarray]:
    """One revision's row and its embedding rows of T (T, d) float64: the embedding alone, plus the whole
    network when the plan measures paths."""
    from ctxstair.models.decoder_hf import from_hf_weights

    files = revision_files(plan.repo_id, revision)
    W_E, weights, where = read_input_embedding(files)
    if progress is not None:
        note = " — no safetensors in this revision: restricted loader" if weights == PICKLE else ""
        progress(f"    {revision} ({files.commit[:12]}): read {where} ({weights}){note}, shape {W_E.shape}")
    if W_E.shape != plan.embedding_shape:
        raise InputError(f"revision {revision} has embeddings of shape {W_E.shape}, unlike {plan.revisions[0]} "
                         f"{plan.embedding_shape}: not one run")
    tokens, V = plan.prepared.tokens, plan.prepared.vocab_size
    row = {"name": revision, "step": revision_step(revision)}
    if plan.sample is not None and plan.sample["skipped"] is None:
        state = read_state(files)
        model, _ = built_model(lambda: from_hf_weights(files.config, state))
        row.update(path_measures(model, revision, *sampled_windows(plan.prepared.windows, plan.sample), tokens, V))
    rows_T = W_E[tokens].astype(np.float64)
    (measured,) = embedding_measures(plan.prepared, rows_T[None])
    return {**checkpoint_row(row, measured), "commit": files.commit, "weights": weights}, rows_T


def _series_folder(out: Path, settings: dict, resume: bool, force: bool, create: bool) -> Path:
    """``out`` checked for a series with ``settings`` and, with ``create``, made ready: created with
    ``series.json`` (an existing one removed first with ``force``), or, with ``resume``, the one there
    kept. InputError naming the first setting that differs from the stored ones."""
    settings = json.loads(json.dumps(settings))
    if out.exists() and not resume:
        if not force:
            raise InputError(f"output directory {out} already exists; pass --resume to continue its series, "
                             "or --force to replace it")
        if not create:
            return out
        if out.is_dir():
            shutil.rmtree(out)
        else:
            out.unlink()
    file = out / "series.json"
    if out.exists():
        if not file.is_file():
            raise InputError(f"{out} holds no series.json: not a Hub series to resume")
        stored = read_json_file(file)
        stored = stored if isinstance(stored, dict) else {}
        differing = next((key for key in settings if stored.get(key) != settings[key]), None)
        if differing is not None:
            raise InputError(f"{out} holds a series with {differing} = {stored.get(differing)!r}, not "
                             f"{settings[differing]!r}: resume it with its own settings, or use another --out")
        return out
    if create:
        out.mkdir(parents=True)
        atomic_write_text(file, json.dumps(settings, indent=2) + "\n")
    return out


def _revision_file(folder: Path, revision: str, suffix: str) -> Path:
    # Quoted so that any revision name (a branch may hold "/") is one file name.
    return folder / "revisions" / f"{quote(revision, safe='')}{suffix}"


def _write_revision(folder: Path, revision: str, row: dict, rows_T: np.ndarray) -> None:
    """A finished revision: its embedding rows first, then its row, whose file marks it finished."""
    atomic_save_npz(_revision_file(folder, revision, ".npz"), {"embedding_rows": rows_T})
    atomic_write_text(_revision_file(folder, revision, ".json"), json.dumps(row, indent=2) + "\n")


def _finished(folder: Path, revision: str, n_tokens: int) -> tuple[dict, np.ndarray] | None:
    """The row and embedding rows of a revision finished in an earlier run, or None when it is not."""
    row_file, rows_file = _revision_file(folder, revision, ".json"), _revision_file(folder, revision, ".npz")
    if not (row_file.is_file() and rows_file.is_file()):
        return None
    row = read_json_file(row_file)
    with np.load(rows_file, allow_pickle=False) as stored:
        rows_T = stored["embedding_rows"]
    if not isinstance(row, dict) or row.get("name") != revision or rows_T.shape[0] != n_tokens:
        raise InputError(f"{row_file} is not the result of revision {revision} for this series")
    return row, rows_T

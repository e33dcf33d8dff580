"""Released checkpoint series on the Hugging Face Hub: the revisions of one repository as a checkpoint
source.

A released training run (Pythia: ``step0, step1, step2, step4, ..., step512, step1000, ...,
step143000``; OLMo, LLM360, SmolLM, Stanford CRFM: :data:`_STEP_NAMES`) is stored as the revisions (git
branches) of one Hub repository, each named by its training step (and, for OLMo, the tokens seen:
:func:`revision_position`). :func:`parse_revisions` turns ``--revisions`` into a list of them (explicit
names, or ``log:N`` chosen from the repository's refs that name a step, :func:`log_spaced`).
:class:`CacheEviction` deletes each revision this run downloaded from the cache once it is measured.

Every file is resolved through ``huggingface_hub.hf_hub_download`` (:func:`fetch`): it downloads,
with its own progress bars, when online, and reads the local cache when offline
(``HF_HUB_OFFLINE=1``). Only what a measurement needs is fetched and read. ρ_next and the prefix
probe need only the input embedding (:func:`read_input_embedding`): its parameter name comes from
the model built from the revision's config on the ``meta`` device (no weights, any
``AutoModelForCausalLM`` architecture), and the tensor is read with ``safetensors.safe_open`` from
``model.safetensors`` or from the one shard that ``model.safetensors.index.json`` names for it — the
model is never instantiated and the other shards are never fetched. Only a revision without any
safetensors is read from ``pytorch_model.bin`` (or its shard index), with PyTorch's restricted
unpickler (:func:`ctxstair.checkpoints.safety.restricted_state_dict`); the checkpoint says so
(``info["weights"]``). The attention-path and path-share measures need the whole network, so for a
config whose family has a view (:mod:`ctxstair.models.view`) and only then every weight file of the
revision is fetched (:func:`read_state`).
``trust_remote_code`` is always False. The tokenizer is the first revision's and serves all of them:
every other revision's ``tokenizer.json`` is fetched at the start and compared with it
(:func:`ctxstair.checkpoints.base.tokenizer_identity`); one that differs is refused before
anything is measured. :meth:`HubSource.main_embedding_sha256` hashes ``main``'s embedding for the
series checks of :func:`ctxstair.measure.analyze_model.series_checks`.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ctxstair.checkpoints.base import (
    Checkpoint,
    Entry,
    built_model,
    check_tokenizers,
    embedding_parameter,
    embedding_sha256,
    first_line,
    model_from_state,
    read_json_file,
    view_positions,
    weight_array,
)
from ctxstair.checkpoints.safety import restricted_state_dict
from ctxstair.errors import InputError
from ctxstair.text.tokenizer import TextTokenizer, quiet_transformers

#: A Hugging Face Hub model id, ``org/name``.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.\-]*/[A-Za-z0-9][\w.\-]*")
#: The revision names that say their training step, one pattern per naming scheme, each matched against the
#: whole name (the first that matches reads it): group ``step``, and where the scheme says the tokens seen so far,
#: ``tokens`` with its ``unit`` (:data:`_TOKEN_UNITS`). A name that none matches (``main``) has no step.
_STEP_NAMES = (
    # Pythia: step0 ... step143000. OLMo: step1000-tokens4B, stage1-step1000-tokens4B,
    # stage2-ingredient1-step23852-tokens200B (a stage prefix, the tokens seen as a suffix).
    re.compile(r"(?:[A-Za-z0-9.]+-)*?step(?P<step>\d+)(?:-tokens(?P<tokens>\d+)(?P<unit>[A-Za-z]*))?"),
    # LLM360 (Amber, K2): ckpt_000 ... ckpt_358.
    re.compile(r"ckpt_(?P<step>\d+)"),
    # SmolLM: step-125000.
    re.compile(r"step-(?P<step>\d+)"),
    # Stanford CRFM (the Mistral GPT-2 runs): checkpoint-400000.
    re.compile(r"checkpoint-(?P<step>\d+)"),
)
#: The multiples of a token count in a revision name (OLMo's ``tokens4B``: 4·10^9); a count in any other unit
#: is not read (the name still gives its step).
_TOKEN_UNITS = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
#: The naming schemes of :data:`_STEP_NAMES`, for messages.
_SCHEMES = "step<N>, stage1-step<N>-tokens<M>B, ckpt_<N>, step-<N> or checkpoint-<N>"
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


def revision_position(revision: str) -> tuple[int | None, int | None]:
    """``(step, tokens seen)`` as a revision's name says them (:data:`_STEP_NAMES`), each None where it does
    not: ``step1000`` -> (1000, None), ``stage1-step1000-tokens4B`` -> (1000, 4_000_000_000), ``ckpt_010``
    -> (10, None), ``main`` and ``stepper`` -> (None, None)."""
    match = next(filter(None, (pattern.fullmatch(revision) for pattern in _STEP_NAMES)), None)
    if match is None:
        return None, None
    count, unit = match.groupdict().get("tokens"), match.groupdict().get("unit")
    tokens = int(count) * _TOKEN_UNITS[unit] if count is not None and unit in _TOKEN_UNITS else None
    return int(match["step"]), tokens


def revision_step(revision: str) -> int | None:
    """The training step a revision names (:func:`revision_position`), None for any other name (``main``)."""
    return revision_position(revision)[0]


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
            revisions that name a step, :func:`series_revisions`); or comma-separated names (``step0,step1000``).

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
    """``n`` of a series' revisions that name a step, log-spaced in the step and always with the first and the last.

    Spacing is uniform in ``u = log(1 + step)``, so step 0 sits at u = 0 like any other step
    (no −∞) and is the first point when the series has it; the targets are ``n`` equal steps of u from
    the first revision's to the last's. Each target takes the revision nearest in u among those after
    the previous choice that leave enough for the targets still to come, so ``n`` distinct revisions
    come back (all of them when the series has at most ``n``): where the series is sparser than the
    targets (Pythia's ``step1 ... step512``) consecutive revisions are taken.

    Args:
        revisions: names that give a step (:func:`revision_step`; any order).
        n: how many, >= 2.

    Returns:
        the chosen names in step order.
    """
    if n < 2:
        raise InputError(f"log:{n} asks for fewer than the first and the last revision; use log:N with N >= 2")
    ordered = in_step_order(revisions)
    steps = [revision_step(name) for name in ordered]
    if None in steps:
        raise InputError(f"log-spacing needs revisions named by their step ({_SCHEMES}), "
                         f"got {ordered[steps.index(None)]!r}")
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
    """The revisions of a Hub repository that name a step (:func:`revision_step`), in step order: its branches
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
        raise InputError(f"{repo_id} has no revisions named by their step ({_SCHEMES}) in {where}: "
                         "name them with --revisions")
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
    name, prefix, shape = embedding_parameter(files.config)
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
            state.update(restricted_state_dict(file))
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
    state = restricted_state_dict(file)
    stored = next((name for name in names if name in state), None)
    return stored, state.get(stored)


class HubSource:
    """Revisions of one Hub model (module docstring), in step order.

    Attributes:
        tokenizer_checks: revision -> ``"same as <first>"`` or why it was not compared (no
            ``tokenizer.json`` in that revision); InputError at construction when one differs.
    """

    def __init__(self, repo_id: str, revisions: list[str]):
        self.repo_id, self.name, self.revisions = repo_id, repo_id, in_step_order(revisions)
        first = revision_files(repo_id, self.revisions[0])
        tokenizer_file = fetch(repo_id, first.commit, "tokenizer.json")
        self.tokenizer = TextTokenizer.load(tokenizer_file)
        self.embedding_shape = embedding_parameter(first.config)[2]
        self.vocab_rows = self.embedding_shape[0]
        self.positions, self.no_model = view_positions(first.config)
        self.tokenizer_sha256, self.tokenizer_checks = self._check_tokenizers(tokenizer_file)

    def _check_tokenizers(self, first_file: Path) -> tuple[str, dict[str, str]]:
        """The first revision's tokenizer hash, and what was found of every other revision's
        tokenizer (:func:`~ctxstair.checkpoints.base.check_tokenizers`)."""
        others = [(revision, fetch(self.repo_id, revision, "tokenizer.json", optional=True))
                  for revision in self.revisions[1:]]
        return check_tokenizers(self.repo_id, (self.revisions[0], first_file), others, kind="revision ")

    def entries(self) -> list[Entry]:
        """One entry per revision, in step order."""
        return [Entry(revision, revision_step(revision), functools.partial(self._load, revision))
                for revision in self.revisions]

    def main_embedding_sha256(self) -> tuple[str | None, str | None]:
        """``(sha256, None)`` of ``main``'s input embedding (:func:`embedding_sha256`), read as any
        revision's; ``(None, why)`` when ``main`` cannot be read (offline and not cached, no weights)."""
        try:
            W_E, _, _ = read_input_embedding(revision_files(self.repo_id, DEFAULT_REVISION))
        except InputError as error:
            return None, str(error)
        return embedding_sha256(W_E), None

    def last_step(self) -> int | None:
        """The largest step of the repository's revisions (:func:`series_revisions`), whose
        embedding is ``main``'s by right; the series' own largest step when they cannot be listed."""
        try:
            names = series_revisions(self.repo_id)
        except InputError:
            names = [name for name in self.revisions if revision_step(name) is not None]
        return revision_step(names[-1]) if names else None

    def _load(self, revision: str, models: bool) -> Checkpoint:
        """The revision's input embedding alone, plus the whole network when ``models`` and the first
        revision's model has a view (:mod:`ctxstair.models.view`)."""
        files = revision_files(self.repo_id, revision)
        W_E, weights, where = read_input_embedding(files)
        if W_E.shape != self.embedding_shape:
            raise InputError(f"revision {revision} has embeddings of shape {W_E.shape}, unlike {self.revisions[0]} "
                             f"{self.embedding_shape}: not one run")
        model = why = None
        if models and self.positions is not None:
            state = read_state(files)
            model, why = built_model(lambda: model_from_state(files.config, state, f"{self.repo_id} at {revision}"))
        elif models:
            why = self.no_model
        step, tokens = revision_position(revision)
        # The tokens seen only where the name says them, so rows of other series keep their fields.
        return Checkpoint(revision, step, W_E, model, why, {"commit": files.commit, "weights": weights, "read": where,
                                                            **({} if tokens is None else {"tokens": tokens})})


class CacheEviction:
    """Deletes from the Hugging Face cache the revisions of one repository that this run downloaded, each once
    it is measured, so that a long series holds about one revision on disk (``--evict-measured``).

    Deleting goes through ``huggingface_hub``'s cache API (``scan_cache_dir(...).delete_revisions(commit)``):
    a revision's snapshot, its refs and the blobs no other revision uses. A revision whose snapshot held a
    weight file when the run started (downloaded beforehand, or by a run without eviction) is the user's and
    is never deleted; a snapshot holding only small files (the tokenizers and config that the start of an
    interrupted run fetched) does not count, so a resumed run still deletes what it downloads. Offline
    nothing is downloaded, so nothing is deleted.

    ``scan_cache_dir`` refuses a repository with a ref to a commit that has no snapshot, and
    ``huggingface_hub`` writes such a ref when it looks for a file a revision lacks (``tokenizer.json``)
    before any of the revision's files is cached. A revision that cannot be deleted then stays pending, is
    tried again with the next one, and the output says so: cleaning the cache never stops a measurement.

    Attributes:
        repo_id: ``org/name``.
        folder: the repository's folder in the cache (``models--ORG--NAME``).
        progress: called with one line for what is deleted, or cannot be yet (None: silent).
        kept: the commits whose weights were cached before the run.
        pending: revision (a commit or a ref) -> its name, still to delete.
    """

    def __init__(self, repo_id: str, progress: Callable[[str], None] | None = None):
        from huggingface_hub import constants
        from huggingface_hub.file_download import repo_folder_name

        self.repo_id, self.progress, self.pending = repo_id, progress, {}
        self.folder = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")
        # Read from the snapshot folders rather than scanned, so that a ref left without a snapshot
        # (above) cannot hide what the user holds.
        snapshots = self.folder / "snapshots"
        self.kept = {snapshot.name for snapshot in snapshots.iterdir() if snapshot.is_dir() and any(
            file.suffix in (".safetensors", ".bin") for file in snapshot.rglob("*"))} if snapshots.is_dir() else set()

    def after(self, on_row: Callable[[dict, bool], None] | None) -> Callable[[dict, bool], None]:
        """An ``on_row`` for :func:`ctxstair.measure.analyze_model.analyze`: ``on_row``, then the row's revision
        evicted (by its ``commit``). The row is written by then, so a resumed run reads it back and does
        not need the revision's weights again."""

        def done(row: dict, before: bool) -> None:
            if on_row is not None:
                on_row(row, before)
            self.evict(row["commit"], row["name"])

        return done

    def evict(self, revision: str, name: str | None = None) -> str | None:
        """Delete the cached revision that ``revision`` (a commit, or a ref such as ``main``) names, and any
        still :attr:`pending`, except the :attr:`kept` ones; say so as ``name`` (default ``revision``).

        Returns:
            the space freed (``"325.0M"``), None when nothing was deleted (kept, not in the cache, or the
            repository cannot be scanned now: then pending).
        """
        from huggingface_hub import scan_cache_dir

        if revision not in self.kept:
            self.pending[revision] = name or revision
        if not self.pending:
            return None
        if not (self.folder / "snapshots").is_dir():  # nothing of the repository in the cache
            self.pending.clear()
            return None
        cache = scan_cache_dir(self.folder.parent)
        repo = next((repo for repo in cache.repos if repo.repo_id == self.repo_id and repo.repo_type == "model"), None)
        if repo is None:
            why = next((first_line(warning) for warning in cache.warnings if self.folder.name in str(warning)),
                       "unreadable")
            self._say(f"    {', '.join(self.pending.values())}: not deleted from the Hugging Face cache yet, "
                      f"it cannot be scanned ({why})")
            return None
        # In the order measured: the cache's revisions are a set, which has none.
        names = {cached.commit_hash: name for wanted, name in self.pending.items() for cached in repo.revisions
                 if wanted in (cached.commit_hash, *cached.refs) and cached.commit_hash not in self.kept}
        self.pending.clear()
        if not names:
            return None
        strategy = cache.delete_revisions(*names)
        strategy.execute()
        self._say(f"    {', '.join(names.values())}: deleted from the Hugging Face cache "
                  f"({strategy.expected_freed_size_str} freed)")
        return strategy.expected_freed_size_str

    def _say(self, line: str) -> None:
        """``line`` to :attr:`progress`, if any."""
        if self.progress is not None:
            self.progress(line)

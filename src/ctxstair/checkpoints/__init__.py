"""Checkpoint sources: where the weights that ``ctxstair analyze-model`` measures come from (SPEC §7).

One module per source behind one interface (:class:`~ctxstair.checkpoints.base.Source`: the
tokenizer, the embedding rows V, the model's positions, and :class:`~ctxstair.checkpoints.base.Entry`
per checkpoint, each read on demand into a :class:`~ctxstair.checkpoints.base.Checkpoint`):

* :mod:`~ctxstair.checkpoints.hf_folder` — a Hugging Face causal-LM folder, or a folder of its
  ``checkpoint-<step>`` folders;
* :mod:`~ctxstair.checkpoints.gguf_file` — a GGUF file, or a fetched model name (``smollm2``);
* :mod:`~ctxstair.checkpoints.run_dir` — an LM run directory of ours, through :class:`~ctxstair.run.Run`;
* :mod:`~ctxstair.checkpoints.hub` — revisions of a model on the Hugging Face Hub.

A model in memory, the monitor's source, is read by :mod:`ctxstair.monitor.live` through the same
:class:`~ctxstair.checkpoints.base.Checkpoint`.

The safe-loading rules of all of them are in :mod:`~ctxstair.checkpoints.safety`. Nothing is
downloaded except Hub files (and only when online); nothing is unpickled except through PyTorch's
restricted loader; no code of a model folder runs.

    source = open_checkpoints("runs/lm")          # or a folder, a .gguf file, "smollm2", "org/name"
    for entry in source.entries():
        checkpoint = entry.load(models=True)     # W_E (V, d), and the model when its family has a view
"""

from __future__ import annotations

import os
from pathlib import Path

from ctxstair import rundir
from ctxstair.checkpoints.base import NO_VIEW, Checkpoint, Entry, Source
from ctxstair.errors import InputError

__all__ = ["NO_VIEW", "Checkpoint", "Entry", "Source", "open_checkpoints", "source_identity"]


def source_identity(source: str | os.PathLike, revisions: list[str] | None = None) -> dict:
    """What identifies a source in a resumable output's settings, known before anything is read: the
    path or model id as given and, for a Hub model, its revisions in step order and the one whose
    tokenizer serves them all."""
    from ctxstair.checkpoints.hub import DEFAULT_REVISION, hub_id, in_step_order

    repo_id = hub_id(source)
    if repo_id is None:
        return {"source": str(source)}
    names = in_step_order(revisions or [DEFAULT_REVISION])
    return {"source": repo_id, "revisions": names, "tokenizer_revision": names[0]}


def open_checkpoints(source: str | os.PathLike, revisions: list[str] | None = None) -> Source:
    """The checkpoint source ``source`` names: a Hub model id ``org/name`` that is not an existing path
    (with ``revisions``, default ``main``), a fetched model name, a ``.gguf`` file, an LM run directory
    of ours, a folder of ``checkpoint-<step>`` folders, or a Hugging Face model folder. InputError with
    one line for anything else (and for ``revisions`` with a local source)."""
    from ctxstair.checkpoints.hub import DEFAULT_REVISION, HubSource, hub_id

    repo_id = hub_id(source)
    if repo_id is not None:
        return HubSource(repo_id, revisions or [DEFAULT_REVISION])
    if revisions is not None:
        raise InputError(f"revisions are for a Hugging Face Hub model id (org/name that is not an existing path), "
                         f"not {source}")
    name, path = str(source), _resolve(source)
    if path.is_file():
        if path.suffix != ".gguf":
            raise InputError(f"{path} is a file but not a GGUF model (.gguf)")
        from ctxstair.checkpoints.gguf_file import GGUFSource

        return GGUFSource(path, name)
    kind = rundir.directory_kind(path)
    if kind == rundir.LM_RUN:
        from ctxstair.checkpoints.run_dir import RunSource

        return RunSource(path, name)
    if kind == rundir.RUN:
        raise InputError(f"{path} is an ensemble run (ctxstair run), not a language model")
    from ctxstair.checkpoints.hf_folder import HFFolderSource, checkpoint_folders

    if checkpoint_folders(path) or (path / "config.json").is_file():
        return HFFolderSource(path, name)
    raise InputError(f"{path} is neither a Hugging Face model directory (config.json), a folder of "
                     "checkpoint-<step> directories, nor an LM run directory (config.yaml, snapshots/)")


def _resolve(source: str | os.PathLike) -> Path:
    """A fetched model name -> its GGUF file; otherwise the existing path ``source``."""
    from ctxstair.text.corpora import SOURCES, files

    name = str(source)
    if name in SOURCES and SOURCES[name].kind == "model":
        return files(name)[0]  # InputError naming `ctxstair data fetch` when not fetched
    path = Path(name).expanduser()
    if not path.exists():
        models = ", ".join(n for n, s in SOURCES.items() if s.kind == "model")
        raise InputError(f"model {name!r} not found: not a path, nor a fetched model name ({models})")
    return path

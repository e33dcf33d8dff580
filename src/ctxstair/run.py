"""A run directory as one object: the contract of ``docs/run-directory.md`` for trainers and analyses.

Both trainers — the ensemble engine (:mod:`ctxstair.train.engine`) and the language-model trainer
(:mod:`ctxstair.lm.train`) — create, resume and fill their run directory through :class:`Run`, and
every per-run analysis (:mod:`ctxstair.analysis`) reads it through :class:`Run`. So there is one
way to start or resume a directory, one checkpoint format, one snapshot naming, one metrics file,
one divergence record and one way to rebuild a trained model::

    run = Run("runs/staircase-add")
    run.config, run.dataset, run.snapshot_times()      # RunConfig, Dataset, [0, 1, 2, ..., 3000]
    model = run.model_at(100)                           # the ensemble with its weights at epoch 100

Time is counted in the trainer's unit, ``run.time_unit``: ``epoch`` for ensembles, ``step`` for
language models. It names the snapshots (``snapshots/<unit>_<t:08d>.safetensors``), keys the
metrics rows and the checkpoint. The file formats themselves are in :mod:`ctxstair.rundir` (numpy
only, for reports and notebooks).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from ctxstair import rundir, tasks
from ctxstair.config import Config, RunConfig, dump_yaml, from_dict
from ctxstair.config.lm import LMConfig
from ctxstair.errors import InputError, TrainingDiverged
from ctxstair.integrity import check_digest, digest
from ctxstair.io import RECORD, atomic_write_bytes, atomic_write_text, claim_output, remove_output
from ctxstair.models import build_ensemble
from ctxstair.signatures import SignatureHierarchy
from ctxstair.tasks import Dataset

CHECKPOINT_DIR = "checkpoint"


def stored_config(folder: Path, cls: type) -> Config:
    """The configuration of type ``cls`` in ``folder/config.yaml``; InputError naming the file for
    damaged YAML (:func:`ctxstair.rundir.read_yaml`), an unknown key or a value of the wrong type."""
    data = rundir.read_yaml(folder, "config.yaml")
    try:
        return from_dict(data, cls).validate()
    except InputError as error:
        raise InputError(f"{folder / 'config.yaml'}: {error}") from None


def config_class(path: Path) -> type:
    """The config class of a run directory's ``config.yaml`` (:func:`ctxstair.rundir.directory_kind`)."""
    return LMConfig if rundir.directory_kind(path) == rundir.LM_RUN else RunConfig


class Run:
    """The run directory at ``path`` (see the module docstring)."""

    def __init__(self, path: str | Path, config: Config | None = None):
        """``config``: the run's configuration when the caller has it already (a trainer); otherwise
        it is read from ``config.yaml`` on first use."""
        self.path = Path(path)
        self._output = None  # set by open(): where the run is written until it is finished
        if config is not None:  # fills the cached property, so config.yaml need not exist yet
            self.__dict__["config"] = config

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r})"

    # ------------------------------------------------------------------ identity

    @cached_property
    def config(self) -> Config:
        """The resolved configuration saved in ``config.yaml`` (:class:`RunConfig` or :class:`LMConfig`)."""
        if not (self.path / "config.yaml").is_file():
            raise InputError(f"{self.path} is not a ctxstair run directory (no config.yaml)")
        return stored_config(self.path, config_class(self.path))

    @property
    def time_unit(self) -> str:
        """``epoch`` (ensemble runs) or ``step`` (language-model runs)."""
        return type(self.config).TIME_UNIT

    @cached_property
    def dataset(self) -> Dataset:
        """The task's dataset of an ensemble run, built once from ``task.name`` and ``task.params``."""
        return tasks.make(self.config.task.name, **self.config.task.params)

    @cached_property
    def signatures(self) -> SignatureHierarchy:
        """``signatures.npz`` of an ensemble run (:func:`ctxstair.rundir.read_signatures`)."""
        return rundir.read_signatures(self.path)

    # ------------------------------------------------------------------ creating and resuming

    def open(self, resume: bool, force: bool, write_files: Callable[[Path], None]) -> bool:
        """Make the directory ready for its trainer; return whether an existing run is continued.

        The rule of every output folder (:func:`ctxstair.io.claim_output`): a new directory appears
        whole, ``write_files(staging)`` adding the trainer's files next to ``config.yaml``; ``resume``
        of an existing directory checks that its ``config.yaml`` is this run's and clears
        temporaries left by a kill, and ``resume`` of a directory that does not exist starts the run,
        so a job script can always pass ``--resume``; ``force`` trains the new run next to the old one
        (:attr:`path` is then the replacement), which is replaced only when the new run is finished
        (:meth:`finish`, :meth:`diverged`). InputError, before anything is written, for an existing
        directory without ``resume`` or ``force``."""

        def start(staging: Path) -> None:
            write_files(staging)
            atomic_write_text(staging / "config.yaml", dump_yaml(self.config))

        self._output = claim_output(self.path, resume=resume, force=force, start=start, same=self._check_same,
                                    what="run directory")
        self.path = self._output.path
        return self._output.resumed

    def _check_same(self, folder: Path) -> None:
        """InputError unless ``folder`` holds a run with this run's configuration."""
        if not (folder / "config.yaml").is_file():
            raise InputError(f"cannot resume {folder}: no run there (config.yaml missing)")
        stored = stored_config(folder, type(self.config))
        for key in getattr(type(self.config), "RESUME_MAY_CHANGE", ()):  # how it runs, not what it computes
            section, name = key.split(".")
            setattr(getattr(stored, section), name, getattr(getattr(self.config, section), name))
        if dump_yaml(stored) != dump_yaml(self.config):  # what config.yaml records: the settings the model uses
            raise InputError(f"cannot resume {folder}: its config.yaml differs from the requested configuration")

    def finish(self, seconds: float, plan: dict | None = None) -> None:
        """Close a completed training: drop the checkpoint (its commit point first), write
        ``resources.json`` (peak memory, the seconds of this session, the numerics set-up and the
        execution ``plan`` when given) and, when it replaces an earlier run, put it in that run's place."""
        self.clear_checkpoint()
        rundir.write_resources(self.path, seconds, plan)
        self._commit()

    def finish_if_interrupted(self, seconds: float, plan: dict | None = None) -> None:
        """Finish a training whose metrics reach its last step but whose :meth:`finish` was cut short: a
        kill after the checkpoint was dropped and before the record was written (or, for a replacement,
        before it took the old run's place) left a run that a resume would otherwise take for complete,
        without ``resources.json``, its record, or its place. A run that holds its record in place is
        finished and is left as it is."""
        in_place = self._output is None or self._output.path == self._output.final
        if not ((self.path / RECORD).is_file() and in_place):
            self.finish(seconds, plan)

    def record_plan(self, plan: dict) -> None:
        """Record the trainer's execution plan in ``resources.json`` as training starts, so that
        ``--resume`` runs the same plan (:meth:`recorded_plan`); :meth:`finish` writes it again."""
        rundir.write_resources(self.path, 0.0, plan)

    def recorded_plan(self) -> dict | None:
        """The execution plan recorded in ``resources.json``, None when there is none."""
        return rundir.read_plan(self.path)

    def _commit(self) -> None:
        if self._output is not None:
            self._output.commit()
            self.path = self._output.path

    def diverged(self, message: str, details: dict, rows: list[dict]) -> TrainingDiverged:
        """Record a diverged training: keep the metrics so far, write ``failure.json`` (``reason``,
        ``details``, ``message``) and drop the checkpoint, since resuming would diverge again.
        Returns the exception for the trainer to raise."""
        rundir.write_metrics(self.path, rows)
        rundir.write_json(self.path, "failure.json", {"reason": "diverged", **details, "message": message})
        self.clear_checkpoint()
        self._commit()  # a diverged run is finished too: its record is what the user looks at
        return TrainingDiverged(message, self.path)

    # ------------------------------------------------------------------ metrics and snapshots

    def metric_rows(self) -> list[dict]:
        """The rows of ``metrics.jsonl`` (:func:`ctxstair.rundir.read_metric_rows`)."""
        return rundir.read_metric_rows(self.path)

    def write_metrics(self, rows: list[dict]) -> None:
        """Replace ``metrics.jsonl`` with ``rows``, atomically."""
        rundir.write_metrics(self.path, rows)

    def snapshot_times(self) -> list[int]:
        """Times (in :attr:`time_unit`) that have a snapshot, ascending."""
        return rundir.snapshot_times(self.path)

    def save_snapshot(self, t: int, model: torch.nn.Module | dict[str, torch.Tensor]) -> None:
        """Write the model's whole state (or a state dict of whole tensors) at time ``t`` (CPU copies,
        verified by SHA-256)."""
        state = model if isinstance(model, dict) else model.state_dict()
        rundir.save_snapshot(self.path, t, {k: v.detach().cpu().numpy() for k, v in state.items()}, self.time_unit)

    def snapshot(self, t: int) -> dict[str, torch.Tensor]:
        """The state (name -> tensor) saved at time ``t``, checked against its SHA-256 (an LM run's
        snapshot of the retired DecoderLM refused: :meth:`refuse_retired_decoder`)."""
        state = {k: torch.from_numpy(v) for k, v in rundir.load_snapshot(self.path, t).items()}
        if isinstance(self.config, LMConfig):
            self.refuse_retired_decoder(state)
        return state

    def model_at(self, t: int, dtype: torch.dtype | None = None) -> torch.nn.Module:
        """The run's model (ensemble or decoder) with the weights of the snapshot at time ``t``,
        in ``dtype`` when given (analyses of language models use float64)."""
        return self.model(self.snapshot(t), dtype)

    def model(self, state: dict[str, torch.Tensor], dtype: torch.dtype | None = None) -> torch.nn.Module:
        """The run's model (ensemble or decoder) with the weights ``state`` (a snapshot already read
        with :meth:`snapshot`), in ``dtype`` when given."""
        state = {k: v.to(dtype) if dtype is not None else v for k, v in state.items()}
        if isinstance(self.config, LMConfig):
            return self._language_model(state, dtype)
        model = build_ensemble(self.config, self.dataset)
        if dtype is not None:
            model = model.to(dtype)
        model.load_state_dict(state)
        return model

    def _language_model(self, state: dict[str, torch.Tensor], dtype: torch.dtype | None) -> torch.nn.Module:
        """The ``transformers`` model of an LM run's config holding ``state`` (its vocabulary is the rows
        of the snapshot's ``W_E``), in eval mode. A run of the retired DecoderLM is refused: its
        snapshots name ``W_E``, ``blocks.ℓ.W_Q``, ... and no ``transformers`` model."""
        from ctxstair.models import causal_lm

        self.refuse_retired_decoder(state)
        key = self.config.model.embedding_key()
        if key not in state:
            raise InputError(f"a snapshot of {self.path} has no {key}, the embedding of its "
                             f"{self.config.model.family} model")
        config = self.config.model_config(vocab_size=state[key].shape[0])
        model = causal_lm.build(config, causal_lm.gammas_of(self.config.model.init), self.config.train.seed)
        model = model.to(dtype) if dtype is not None else model
        return causal_lm.load_state(model, state, f"a snapshot of {self.path}").eval()

    def refuse_retired_decoder(self, state: dict) -> None:
        """InputError (one line: how to train it again) when ``state``, a snapshot of an LM run, holds
        the weights of the project's own decoder (DecoderLM, retired for ``transformers`` models:
        ``W_E``, ``blocks.ℓ.W_Q``, ...). Such runs are not converted: their config trains the same
        architecture again as ``model.family=llama``."""
        if "W_E" in state:
            raise InputError(f"{self.path} was trained by an earlier ctxstair with its own decoder (DecoderLM), which "
                             "is retired: train it again with `ctxstair lm train` and the settings of "
                             f"{self.path / 'config.yaml'} (model.family=llama is the same architecture)")

    # ------------------------------------------------------------------ checkpoints

    def has_checkpoint(self) -> bool:
        """Whether the directory holds a resumable state."""
        return (self.path / CHECKPOINT_DIR / "state.json").is_file()

    def save_checkpoint(self, t: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                        generator: torch.Generator) -> None:
        """Save the state at the start of time ``t``: parameters, the optimizer's tensors (None: a
        stateless update such as the exact gradient flow) and the batch generator
        (:func:`checkpoint_tensors`, :meth:`write_checkpoint`)."""
        self.write_checkpoint(t, checkpoint_tensors(model, optimizer, generator))

    def write_checkpoint(self, t: int, tensors: dict[str, torch.Tensor]) -> None:
        """Write checkpoint ``tensors`` (:func:`checkpoint_tensors`) of time ``t`` as one safetensors
        file, then ``checkpoint/state.json`` (``{<unit>: t, "tensors": file, "sha256": ...}``) last: the
        commit point. An interruption at any moment leaves the previous or the new state valid."""
        folder = self.path / CHECKPOINT_DIR
        name, data = f"state-{t:08d}.safetensors", save_tensors(tensors)
        atomic_write_bytes(folder / name, data)
        atomic_write_text(folder / "state.json",
                          json.dumps({self.time_unit: t, "tensors": name, "sha256": digest(data)}) + "\n")
        for old in folder.glob("state-*.safetensors"):
            if old.name != name:
                remove_output(old)

    def load_checkpoint(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                        generator: torch.Generator) -> int:
        """Restore the saved state into the given objects (tensors copied onto their devices,
        :func:`restore_checkpoint`); return the time to continue from."""
        t, tensors = self.read_checkpoint()
        restore_checkpoint(tensors, model, optimizer, generator)
        return t

    def read_checkpoint(self) -> tuple[int, dict[str, torch.Tensor]]:
        """(time to continue from, the checkpoint's tensors). InputError naming the file when it is
        missing, does not match its SHA-256 or is not a safetensors file."""
        folder = self.path / CHECKPOINT_DIR
        try:
            info = json.loads((folder / "state.json").read_text())
            path = folder / info["tensors"]
            if path.resolve().parent != folder.resolve():
                raise ValueError(f"it names {info['tensors']!r}, outside the checkpoint folder")
            data = path.read_bytes()
            t = int(info[self.time_unit])
        except (OSError, KeyError, TypeError, ValueError) as error:
            raise InputError(f"cannot resume {self.path}: its checkpoint is missing or unreadable ({error})") from None
        if "sha256" in info:  # checkpoints written before hashes were recorded have none
            check_digest(path, data, info["sha256"], folder / "state.json")
        try:
            return t, load_tensors(data)
        except Exception as error:  # safetensors raises its own error types for corrupt files
            raise InputError(f"cannot resume {self.path}: {path} is unreadable ({error})") from None

    def clear_checkpoint(self) -> None:
        """Remove the checkpoint, its commit point (``state.json``) first."""
        remove_output(self.path / CHECKPOINT_DIR / "state.json")
        remove_output(self.path / CHECKPOINT_DIR)


def _cpu_copy(value: torch.Tensor) -> torch.Tensor:
    return value.detach().cpu().clone()


def checkpoint_tensors(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, generator: torch.Generator,
                       copy: Callable[[torch.Tensor], torch.Tensor] = _cpu_copy) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint: ``param.<name>`` for every parameter, ``optim.<index>.<field>``
    for the optimizer's tensors, ``rng`` for the generator's state; ``copy`` makes each CPU copy
    (a sharded trainer passes one that gathers the whole tensor)."""
    tensors = {f"param.{name}": copy(p) for name, p in model.named_parameters()}
    for pid, state in (optimizer.state_dict()["state"] if optimizer is not None else {}).items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{pid}.{key}"] = copy(value)
    tensors["rng"] = generator.get_state()
    return tensors


def restore_checkpoint(tensors: dict[str, torch.Tensor], model: torch.nn.Module,
                       optimizer: torch.optim.Optimizer | None, generator: torch.Generator,
                       place: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = lambda value, p: value) -> None:
    """Load checkpoint ``tensors`` (:func:`checkpoint_tensors`) into the objects; ``place(value, p)``
    turns a saved tensor into what parameter ``p`` (or its optimizer state) holds (a sharded
    trainer passes one that keeps the rank's own rows)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(place(tensors[f"param.{name}"], p))
    if optimizer is not None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        state = optimizer.state_dict()
        for key, value in sorted(tensors.items()):  # one order on every rank (a sharded place() is a collective)
            if key.startswith("optim."):
                _, pid, field = key.split(".", 2)
                state["state"].setdefault(int(pid), {})[field] = place(value, params[int(pid)])
        optimizer.load_state_dict(state)
    generator.set_state(tensors["rng"])

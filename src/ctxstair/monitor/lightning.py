"""The staircase measurements inside a PyTorch Lightning run (SPEC §6.4, §7; extra ``ctxstair[lightning]``).

    monitor = StaircaseMonitor(windows, monitor_tokens(tokenizer, windows))
    trainer = lightning.Trainer(max_steps=3000, callbacks=[StaircaseLightningCallback(monitor)])
    trainer.fit(module)        # staircase/rho_next ... in every logger (TensorBoard, CSV, W&B, MLflow)

At each step of the :class:`~ctxstair.monitor.staircase.Cadence` (counted in optimizer steps,
``trainer.global_step``, after the step) the global-zero process measures the model and hands the
numbers to every logger of the trainer (``logger.log_metrics(metrics, step)``). In a data-parallel
run the other processes do nothing, and nothing is communicated between processes, so the run cannot
wait on it. A sharded model (``ModelParallelStrategy``'s FSDP2, ``FSDPStrategy``'s FSDP1 — whose
root is ``trainer.strategy.model`` — or DeepSpeed ZeRO-3) is measured on every process, at the same
steps, because its weights are gathered by collectives that all of them join; global zero logs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import lightning.pytorch as pl
import torch

from ctxstair.errors import InputError
from ctxstair.monitor import KEY_PREFIX
from ctxstair.monitor.live import every_rank
from ctxstair.monitor.staircase import EVERY, LOG_POINTS, PATHS_EVERY, Cadence, StaircaseMonitor, callback_schedule


class StaircaseLightningCallback(pl.Callback):
    """A ``lightning.pytorch.Callback`` logging :class:`~ctxstair.monitor.staircase.StaircaseMonitor`
    measurements (SPEC §6.4, §7) as ``staircase/<name>`` (module docstring).

    Args:
        monitor: the monitor, built from a sample of the training corpus.
        log_points: ρ_next's log-spaced steps up to ``every``. This and the next three are the
            :class:`~ctxstair.monitor.staircase.Cadence` over the run's steps (``trainer.max_steps``,
            else ``trainer.estimated_stepping_batches``), with its defaults.
        every: then ρ_next every ``every`` steps.
        paths_every: the path measures' stride.
        probe_every: the probe's stride.
        model: picks the network out of the LightningModule (default: the module itself when it has
            input embeddings, else its ``model`` attribute).

    Attributes:
        history: one ``{"step": ..., "staircase/<name>": ...}`` dict per measurement (global zero only).
    """

    def __init__(self, monitor: StaircaseMonitor, *, log_points: int = LOG_POINTS, every: int = EVERY,
                 paths_every: int | None = PATHS_EVERY, probe_every: int | None = None,
                 model: Callable[[pl.LightningModule], torch.nn.Module] | None = None):
        self.schedule = callback_schedule(monitor, log_points, every, paths_every, probe_every)
        self.monitor = monitor
        self.select = model or _network
        self.cadence: Cadence | None = None
        self.history: list[dict] = []
        self._last_step = -1

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        steps = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else trainer.estimated_stepping_batches
        self.cadence = Cadence(int(steps), **self.schedule)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        step = trainer.global_step
        # With gradient accumulation several batches end at one optimizer step: measure it once.
        if self.cadence is None or step == self._last_step or step not in self.cadence:
            return
        self._last_step = step
        network, root = self.select(pl_module), trainer.strategy.model
        if not (trainer.is_global_zero or every_rank(network, root)):
            return
        start = time.perf_counter()
        values = self.monitor.measure_at(network, step, self.cadence, root=root)
        if not trainer.is_global_zero:
            return
        values["seconds"] = time.perf_counter() - start
        metrics = {KEY_PREFIX + name: value for name, value in values.items()}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
        self.history.append({"step": step, **metrics})


def _network(module: pl.LightningModule) -> torch.nn.Module:
    """The module itself when it exposes input embeddings, else its ``model`` attribute."""
    if callable(getattr(module, "get_input_embeddings", None)) or getattr(module, "W_E", None) is not None:
        return module
    inner = getattr(module, "model", None)
    if not isinstance(inner, torch.nn.Module):
        raise InputError(f"{type(module).__name__} has no input embeddings and no `model` attribute: pass "
                         "StaircaseLightningCallback(monitor, model=lambda module: module.<your network>)")
    return inner

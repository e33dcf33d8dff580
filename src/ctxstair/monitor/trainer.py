"""The staircase measurements inside a Hugging Face ``Trainer`` run (SPEC §6.4, §7).

    monitor = StaircaseMonitor(windows, monitor_tokens(tokenizer, windows))
    trainer = Trainer(model=model, args=TrainingArguments(..., report_to="tensorboard"), ...)
    attach(trainer, monitor)            # before trainer.train()
    trainer.train()                     # staircase/rho_next ... in log_history and TensorBoard

How the numbers reach both ``trainer.state.log_history`` and every ``report_to`` integration
(transformers 5.x, ``trainer.py`` / ``trainer_callback.py``): ``Trainer.log(logs)`` appends a copy
``{**logs, "step": step}`` to ``log_history`` and then calls ``on_log`` of every callback in list
order with the same ``logs`` dict; the integrations (TensorBoard, W&B, MLflow...) are created at
construction, so they come before any callback passed with ``callbacks=`` or added later with
``add_callback``. So :class:`StaircaseCallback`

1. at a step of its :class:`~ctxstair.monitor.staircase.Cadence` sets ``control.should_log`` in
   ``on_step_end`` on every process (``Trainer`` gathers the loss across processes when it logs,
   so all of them must log at the same steps, or the gather would wait forever) and measures on the
   main process only (``state.is_world_process_zero``) — on every process when the model is sharded
   (FSDP2, FSDP1, DeepSpeed ZeRO-3), whose weights are gathered by collectives that all of them join;
   the main process gets the numbers;
2. in the ``on_log`` of that step adds the numbers to ``logs`` — seen by every callback after it —
   and to the ``log_history`` entry just appended for the step.

:func:`attach` puts the callback at the front of ``trainer.callback_handler.callbacks``, before the
integrations, so they all see the numbers, and lets it find the training's FSDP1 wrapper
(``trainer.model_wrapped``: under FSDP1 the callbacks are handed the network inside it, whose own
parameters hold no data outside the forward pass). A callback passed with ``callbacks=[...]`` still fills
``log_history`` (and ``trainer_state.json``) but comes after the integrations; it warns once when
``report_to`` names any. Measuring in ``on_step_end`` rather than ``on_log`` keeps the
measurement at the step whatever else logs then (an evaluation's ``on_log`` comes later).
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

from transformers import TrainerCallback

from ctxstair.errors import InputError
from ctxstair.io import atomic_write_text
from ctxstair.monitor import KEY_PREFIX, SETTINGS_FILE
from ctxstair.monitor.live import every_rank
from ctxstair.monitor.staircase import EVERY, LOG_POINTS, PATHS_EVERY, Cadence, StaircaseMonitor, callback_schedule


class StaircaseCallback(TrainerCallback):
    """A ``transformers.TrainerCallback`` logging :class:`~ctxstair.monitor.staircase.StaircaseMonitor`
    measurements (SPEC §6.4, §7) as ``staircase/<name>`` (module docstring; add it with :func:`attach`).

    Args:
        monitor: the monitor, built from a sample of the training corpus.
        log_points: ρ_next's log-spaced steps up to ``every`` (default 24). This and the next three
            are the :class:`~ctxstair.monitor.staircase.Cadence` over the run's ``max_steps``.
        every: then ρ_next every ``every`` steps (default 250).
        paths_every: the path measures every ``paths_every`` steps and at the last (default 1000).
        probe_every: the probe's stride (default None: never).

    Besides the monitor's numbers, ``staircase/seconds`` is the wall time of each measurement. At
    the start of training the main process writes the monitor's settings, the token strings (when
    the Trainer has a fast tokenizer) and the cadence to ``<output_dir>/staircase_monitor.json``.

    Attributes:
        history: one ``{"step": ..., "staircase/<name>": ...}`` dict per measurement of this process
            (empty on every process but the main one); ``measured_steps`` lists their steps.
        skipped: why the path measures were not taken (a model whose family has no view), or None.
    """

    def __init__(self, monitor: StaircaseMonitor, *, log_points: int = LOG_POINTS, every: int = EVERY,
                 paths_every: int | None = PATHS_EVERY, probe_every: int | None = None):
        self.schedule = callback_schedule(monitor, log_points, every, paths_every, probe_every)
        self.monitor = monitor
        self.cadence: Cadence | None = None
        self.attached = False
        self.trainer = None  # set by attach: its model_wrapped is an FSDP1 root
        self.history: list[dict] = []
        self.skipped: str | None = None
        self._pending: tuple[int, dict[str, float]] | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.cadence = Cadence(state.max_steps, **self.schedule)
        integrations = [name for name in (args.report_to or []) if name != "none"]
        if integrations and not self.attached:
            warnings.warn(f"StaircaseCallback was added after the report_to integrations ({', '.join(integrations)}), "
                          "which then do not see its numbers (log_history does); add it with "
                          "ctxstair.monitor.attach(trainer, monitor)", stacklevel=2)
        if state.is_world_process_zero:
            record = {"monitor": self.monitor.settings(), "cadence": {**self.schedule, "steps": self.cadence.steps},
                      "token_strings": _token_strings(kwargs.get("processing_class"), self.monitor.tokens)}
            Path(args.output_dir).mkdir(parents=True, exist_ok=True)
            atomic_write_text(Path(args.output_dir) / SETTINGS_FILE, json.dumps(record, indent=1) + "\n")

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if self.cadence is None or step not in self.cadence:
            return control
        control.should_log = True  # on every process: the Trainer's log gathers the loss across processes
        root = getattr(self.trainer, "model_wrapped", None)
        if not (state.is_world_process_zero or every_rank(model, root)):
            return control
        start = time.perf_counter()
        values = self.monitor.measure_at(model, step, self.cadence, root=root)
        if state.is_world_process_zero:
            values["seconds"] = time.perf_counter() - start
            self.skipped = self.monitor.skipped
            self._pending = (step, {KEY_PREFIX + name: value for name, value in values.items()})
            self.history.append({"step": step, **self._pending[1]})
        return control

    @property
    def measured_steps(self) -> list[int]:
        """The steps this process measured at."""
        return [row["step"] for row in self.history]

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._pending is None or logs is None or self._pending[0] != state.global_step:
            return control
        numbers = self._pending[1]
        self._pending = None
        logs.update(numbers)  # the dict every later callback (the integrations, after attach) receives
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(numbers)  # Trainer.log appended a copy of logs before on_log
        return control


def attach(trainer, monitor: StaircaseMonitor, **cadence) -> StaircaseCallback:
    """Add a :class:`StaircaseCallback` (SPEC §6.4, §7 measurements) for ``monitor`` to ``trainer`` in
    front of its other callbacks, so that the ``report_to`` integrations see its numbers (module
    docstring); call it before ``trainer.train()``.

    Args:
        trainer: a ``transformers.Trainer``.
        monitor: the :class:`~ctxstair.monitor.staircase.StaircaseMonitor`.
        cadence: ``log_points``, ``every``, ``paths_every``, ``probe_every`` of :class:`StaircaseCallback`.

    Returns:
        the callback (its ``history`` and ``skipped`` say what it did).
    """
    handler = getattr(trainer, "callback_handler", None)
    if not isinstance(getattr(handler, "callbacks", None), list):
        raise InputError(f"attach needs a transformers Trainer (with a callback_handler), got {type(trainer).__name__}")
    callback = StaircaseCallback(monitor, **cadence)
    callback.attached, callback.trainer = True, trainer
    handler.callbacks.insert(0, callback)
    return callback


def _token_strings(processing_class, tokens) -> list[str] | None:
    """The decoded strings of ``tokens`` from the Trainer's tokenizer, when it is a fast tokenizer."""
    from ctxstair.text.tokenizer import TextTokenizer

    try:
        tokenizer = TextTokenizer.from_transformers(processing_class)
    except InputError:
        return None
    return [tokenizer.token_string(int(t)) for t in tokens]

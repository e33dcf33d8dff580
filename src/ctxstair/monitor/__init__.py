"""Staircase measurements inside anyone's training run (SPEC §6.4, §7).

* :class:`~ctxstair.monitor.staircase.StaircaseMonitor` — built once from a corpus sample (token
  windows and the tokens to analyse, :func:`~ctxstair.monitor.staircase.monitor_tokens`);
  ``measure(model)`` returns ρ_next, the held-out prefix probe next to its shuffled control and, for
  models of a family with a view (:mod:`ctxstair.models.view`), the attention-path correlation per
  layer and the path shares of the
  embedding update — the numbers ``ctxstair analyze-model`` computes from saved checkpoints.
* :class:`~ctxstair.monitor.trainer.StaircaseCallback` and :func:`~ctxstair.monitor.trainer.attach`
  — a Hugging Face ``TrainerCallback`` that logs them as ``staircase/<name>`` into the Trainer's
  ``log_history`` and every ``report_to`` integration (needs ``transformers``, ``accelerate``).
* :class:`~ctxstair.monitor.lightning.StaircaseLightningCallback` — the same for PyTorch Lightning
  (extra ``ctxstair[lightning]``).
* :class:`~ctxstair.monitor.staircase.Cadence` — when to measure what (ρ_next log-spaced, then
  regularly; the expensive parts sparser), shared by the callbacks and a plain loop
  (``monitor.log(writer, model, step, cadence)``).
* :mod:`~ctxstair.monitor.live` — the weights of the model in memory, as a checkpoint the
  measurement reads (under FSDP2, FSDP1 or ZeRO-3 gathered across ranks by
  :mod:`~ctxstair.monitor.gather`).

Names are imported on first use, so ``import ctxstair.monitor`` loads neither torch, transformers
nor lightning. The guide is ``docs/monitor.md``.

    from ctxstair.monitor import StaircaseMonitor, attach, monitor_tokens
    monitor = StaircaseMonitor(windows, monitor_tokens(tokenizer, windows))
    attach(trainer, monitor)          # before trainer.train()
"""

from __future__ import annotations

import importlib

from ctxstair.measure.schema import LOG_PREFIX

#: Prefix of every logged name: ``staircase/rho_next``, ``staircase/attention_path_corr/0``... (the
#: names of :mod:`ctxstair.measure.schema`).
KEY_PREFIX = LOG_PREFIX
#: The file the Trainer callback writes into the Trainer's output directory (the monitor's settings,
#: tokens and schedule), read by ``ctxstair report``.
SETTINGS_FILE = "staircase_monitor.json"

_EXPORTS = {
    "StaircaseMonitor": "staircase", "monitor_tokens": "staircase", "monitor_steps": "staircase",
    "Cadence": "staircase",
    "StaircaseCallback": "trainer", "attach": "trainer",
    "StaircaseLightningCallback": "lightning",
}

__all__ = sorted([*_EXPORTS, "KEY_PREFIX", "SETTINGS_FILE"])


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"ctxstair.monitor.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'ctxstair.monitor' has no attribute {name!r}")

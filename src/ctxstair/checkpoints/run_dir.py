"""An LM run directory of this project (:mod:`ctxstair.lm.train`): one checkpoint per snapshot
(``snapshots/step_XXXXXXXX.safetensors``), read through :class:`ctxstair.run.Run`, so every snapshot
is checked against its SHA-256 on load; with ``models`` each carries the run's ``transformers``
model (``config.yaml``: its family and sizes) with the snapshot's weights, in float32."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from ctxstair.checkpoints.base import Checkpoint, Entry, built_model, weight_array
from ctxstair.errors import InputError
from ctxstair.run import Run
from ctxstair.text.tokenizer import TextTokenizer


class RunSource:
    """An LM run directory (module docstring)."""

    def __init__(self, path: Path, name: str | None = None):
        self.run, self.name = Run(path), name or str(path)
        self.tokenizer = TextTokenizer.load(path / "tokenizer.json")
        self.vocab_rows = self.tokenizer.vocab_size  # the run's W_E has one row per token of its tokenizer
        self.positions, self.no_model = self.run.config.corpus.window, None
        self.steps = self.run.snapshot_times()
        if not self.steps:
            raise InputError(f"{path / 'snapshots'} holds no snapshot: was the run trained with snapshots?")

    def entries(self) -> list[Entry]:
        """One entry per snapshot, by step; named as the snapshot files (``step_00000050``)."""
        unit = self.run.time_unit
        return [Entry(f"{unit}_{step:08d}", step, functools.partial(self._load, step)) for step in self.steps]

    def _load(self, step: int, models: bool) -> Checkpoint:
        state = self.run.snapshot(step)  # checked against its SHA-256; a retired DecoderLM run refused
        key = self.run.config.model.embedding_key()
        if key not in state:
            raise InputError(f"the snapshot of step {step} in {self.run.path} has no {key} tensor (W_E)")
        model, why = built_model(lambda: self.run.model(state, torch.float32)) if models else (None, None)
        return Checkpoint(f"{self.run.time_unit}_{step:08d}", step, weight_array(state[key]), model, why)

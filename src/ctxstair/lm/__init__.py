"""Training language models (SPEC §7, §10): ``train_lm`` (:mod:`~ctxstair.lm.train`) trains a
``transformers`` causal LM of any family from γ-init (configured by
:class:`ctxstair.config.lm.LMConfig`) with log-spaced snapshots, resumable, on one process or under
DDP or FSDP2 (:mod:`~ctxstair.lm.fsdp`); :mod:`~ctxstair.lm.export` writes a run's models as
Hugging Face folders.

Its analysis, ρ_next, the prefix probe, attention-path correlations and path shares per snapshot, is
:mod:`ctxstair.analysis.lm_staircase` over :mod:`ctxstair.measure`; text, tokenizers and windows
are :mod:`ctxstair.text`, checkpoint sources :mod:`ctxstair.checkpoints`.

``train_lm`` is imported on first use, so ``import ctxstair.lm`` (and so registering the
``ctxstair`` sub-commands) stays cheap.
"""

from __future__ import annotations

import importlib

__all__ = ["train_lm"]


def __getattr__(name: str):
    if name == "train_lm":
        return importlib.import_module("ctxstair.lm.train").train_lm
    raise AttributeError(f"module 'ctxstair.lm' has no attribute {name!r}")

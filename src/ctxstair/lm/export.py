"""An LM run's models as Hugging Face folders, which any tool opens (SPEC §10).

A run's model is a ``transformers`` causal LM (:mod:`ctxstair.models.causal_lm`), so a snapshot is
already its state dict: exporting builds the model of the run's config, loads the snapshot and writes
it with ``save_pretrained`` (``config.json``, ``model.safetensors``, ``generation_config.json``),
next to the run's tokenizer as a ``PreTrainedTokenizerFast`` (``tokenizer.json``,
``tokenizer_config.json``). ``AutoModelForCausalLM.from_pretrained(folder)`` and
``AutoTokenizer.from_pretrained(folder)`` then load it offline, and vLLM, TransformerLens and nnsight
open it as any checkpoint of its family.

Where, in the run directory: ``hf_model/`` — the final model (the snapshot of the last step), always;
``hf_snapshots/step_XXXXXXXX/`` — every snapshot, with ``snapshots.export=true``. Each folder is
written whole or not at all (:func:`ctxstair.io.fresh_output_dir`), from the snapshot files alone, so
it can be written again at any time from the run directory (:func:`export_run`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ctxstair.io import fresh_output_dir
from ctxstair.run import Run
from ctxstair.text.tokenizer import TextTokenizer, quiet_transformers

__all__ = ["FINAL", "SNAPSHOTS", "export_run", "export_snapshot"]

#: The folders of a run directory that hold its exported models.
FINAL, SNAPSHOTS = "hf_model", "hf_snapshots"


def export_snapshot(run: Run, step: int, out: Path) -> Path:
    """Write the model of ``run``'s snapshot at ``step`` with its tokenizer as a Hugging Face folder
    ``out`` (module docstring), replacing one there once the new one is complete; return ``out``."""
    from transformers import PreTrainedTokenizerFast

    model = run.model_at(step, torch.float32)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=TextTokenizer.load(run.path / "tokenizer.json").tokenizer)
    with fresh_output_dir(out, force=True) as staging, quiet_transformers():  # our progress alone on stderr
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return out


def export_run(run: Run, every_snapshot: bool = False, missing_only: bool = False) -> list[Path]:
    """Export ``run``'s final model to ``hf_model/`` and, with ``every_snapshot``, each snapshot to
    ``hf_snapshots/step_XXXXXXXX/``; ``missing_only``: leave folders that exist (a resumed run).
    Returns the folders written."""
    steps = run.snapshot_times()
    targets = [(steps[-1], run.path / FINAL)]
    if every_snapshot:
        targets += [(step, run.path / SNAPSHOTS / f"{run.time_unit}_{step:08d}") for step in steps]
    return [export_snapshot(run, step, out) for step, out in targets if not (missing_only and out.is_dir())]

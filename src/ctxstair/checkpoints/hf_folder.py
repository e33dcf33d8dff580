"""Checkpoints saved by Hugging Face ``transformers``: a causal-LM folder (``config.json``, safetensors
weights, ``tokenizer.json``), or a folder of ``checkpoint-<step>`` folders from one run (a
``Trainer`` output), one checkpoint per step; a model saved at the top of such a folder next to its
checkpoints is not read (the curve is what is asked for; the final model is usually the last
checkpoint). Weights go through ``AutoModelForCausalLM.from_pretrained(..., local_files_only=True,
use_safetensors=True, trust_remote_code=False)`` after the safety check of
:mod:`ctxstair.checkpoints.safety`.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from ctxstair.checkpoints.base import (
    Checkpoint,
    Entry,
    check_tokenizers,
    embedding_parameter,
    first_line,
    view_positions,
    weight_array,
)
from ctxstair.checkpoints.safety import check_safe_weights
from ctxstair.errors import InputError
from ctxstair.text.tokenizer import TextTokenizer, quiet_transformers

_CHECKPOINT_DIR = re.compile(r"checkpoint-(\d+)")


def checkpoint_folders(path: Path) -> list[tuple[int, Path]]:
    """The ``checkpoint-<step>`` folders of ``path``, by step ([] when it has none)."""
    return sorted((int(m.group(1)), p) for p in path.iterdir()
                  if p.is_dir() and (m := _CHECKPOINT_DIR.fullmatch(p.name)))


class HFFolderSource:
    """A Hugging Face model folder, or a folder of its checkpoints (module docstring).

    Attributes:
        tokenizer_sha256, tokenizer_checks: the tokenizer's hash and, per other checkpoint folder,
            ``"same as <first>"`` or why it was not compared; both None for a single model folder.
    """

    def __init__(self, path: Path, name: str | None = None):
        steps = checkpoint_folders(path)
        self.folders: list[tuple[int | None, Path]] = steps or [(None, path)]
        first = self.folders[0][1]
        self.name = name or str(path)
        home = first if (first / "tokenizer.json").is_file() else path
        self.tokenizer = TextTokenizer.from_pretrained_dir(home)
        self.tokenizer_sha256, self.tokenizer_checks = None, None
        if steps:
            others = [(folder.name, file if (file := folder / "tokenizer.json").is_file() else None)
                      for _, folder in steps if folder != home]
            self.tokenizer_sha256, self.tokenizer_checks = check_tokenizers(
                str(path), (home.name, home / "tokenizer.json"), others)
        config = _config(first)
        self.vocab_rows = embedding_parameter(config)[2][0]
        self.positions, self.no_model = view_positions(config)
        self.path = path

    def entries(self) -> list[Entry]:
        """One entry per folder, by step."""
        return [Entry(folder.name, step, functools.partial(_load, folder, step)) for step, folder in self.folders]


def _config(folder: Path):
    """The ``transformers`` config of the model saved in ``folder``."""
    from transformers import AutoConfig

    check_safe_weights(folder)
    with quiet_transformers():
        try:
            return AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        except (OSError, ValueError, KeyError) as error:
            raise InputError(f"cannot load the model in {folder}: {first_line(error)}") from None


def _load(folder: Path, step: int | None, models: bool) -> Checkpoint:
    """``get_input_embeddings().weight`` of the causal LM saved in ``folder`` and, with ``models``, the
    model itself in float32 (or None and why: its family has no view)."""
    import torch
    from transformers import AutoModelForCausalLM

    check_safe_weights(folder)
    with quiet_transformers():
        try:
            # use_safetensors=True: never fall back to pytorch_model.bin (a pickle), whatever the
            # transformers version; trust_remote_code=False: refuse (rather than prompt for) custom code.
            model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, use_safetensors=True,
                                                         trust_remote_code=False)
        except (OSError, ValueError, KeyError) as error:
            raise InputError(f"cannot load the model in {folder}: {first_line(error)}") from None
    W_E = weight_array(model.get_input_embeddings().weight)
    if not models:
        return Checkpoint(folder.name, step, W_E)
    _, why = view_positions(model.config)
    if why is not None:
        return Checkpoint(folder.name, step, W_E, None, why)
    return Checkpoint(folder.name, step, W_E, model.to(torch.float32).eval())

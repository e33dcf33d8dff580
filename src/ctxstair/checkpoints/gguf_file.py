"""A GGUF file (llama.cpp's format), or the name of a fetched one (``smollm2``: SmolLM2-135M-Instruct,
Q4_1, SPEC §10).

The embedding tensor ``token_embd.weight`` is read and dequantised with ``gguf`` — the routine
``transformers`` uses when it loads the whole model (identical values) — without building the
model; the tokenizer comes from ``transformers`` (``gguf_file=``, :meth:`TextTokenizer.from_gguf`). Opening
the source reads the tokenizer only: the embedding rows, the model's positions and the weights are
read when first asked for, so statistics of another tokenizer are refused before any weight is read.
For a GGUF file of a family with a view (:mod:`ctxstair.models.view`) the whole network is read by
``transformers``' own GGUF reader (``load_gguf_checkpoint``: the tensors dequantised and the query/key
rows of llama.cpp's RoPE layout put back, as
``from_pretrained(gguf_file=...)`` does, without its ``accelerate`` requirement).
"""

from __future__ import annotations

import contextlib
import functools
import io
from pathlib import Path

import numpy as np

from ctxstair.checkpoints.base import (
    NO_VIEW,
    Checkpoint,
    Entry,
    built_model,
    first_line,
    model_from_state,
    view_positions,
)
from ctxstair.errors import InputError
from ctxstair.text.tokenizer import TextTokenizer, quiet_transformers

#: The input-embedding tensor of a GGUF file (llama.cpp naming, every architecture).
GGUF_EMBEDDING = "token_embd.weight"


class GGUFSource:
    """One GGUF file: a single checkpoint (module docstring)."""

    def __init__(self, file: Path, name: str | None = None):
        self.file, self.name = file, name or str(file)
        self.tokenizer = TextTokenizer.from_gguf(file)

    @property
    def vocab_rows(self) -> int:
        """V, the rows of the input embedding (read with it)."""
        return self.embeddings.shape[0]

    @functools.cached_property
    def _view(self) -> tuple[int | None, str | None]:
        return _positions(self.file)

    @property
    def positions(self) -> int | None:
        """The model's longest window when its family has a view (from the file's metadata), else None."""
        return self._view[0]

    @property
    def no_model(self) -> str | None:
        """Why the model has no view, or None."""
        return self._view[1]

    @functools.cached_property
    def embeddings(self) -> np.ndarray:
        """The dequantised input embedding (V, d) float32, read once."""
        return _gguf_embeddings(self.file)

    def entries(self) -> list[Entry]:
        """The file's one entry."""
        return [Entry(self.file.name, None, self._load)]

    def _load(self, models: bool) -> Checkpoint:
        model, why = _gguf_model(self.file) if models else (None, None)
        return Checkpoint(self.file.name, None, self.embeddings, model, why)


def _gguf_embeddings(file: Path) -> np.ndarray:
    """The dequantised ``token_embd.weight`` of a GGUF file, (V, d) float32."""
    import gguf

    try:
        reader = gguf.GGUFReader(file)
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read GGUF file {file}: {first_line(error)}") from None
    tensor = next((t for t in reader.tensors if t.name == GGUF_EMBEDDING), None)
    if tensor is None:
        raise InputError(f"GGUF file {file} has no {GGUF_EMBEDDING} tensor")
    return np.ascontiguousarray(gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)


def _gguf_config(file: Path) -> dict:
    """The ``transformers`` config dict of a GGUF file (its metadata only)."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    # Its progress bar is a plain tqdm on stderr, not the transformers one quiet_transformers turns off.
    with quiet_transformers(), contextlib.redirect_stderr(io.StringIO()):
        return load_gguf_checkpoint(str(file))["config"]


def _positions(file: Path) -> tuple[int | None, str | None]:
    """``(longest window, None)`` of a GGUF file whose model's family has a view, else ``(None, why)``."""
    try:
        config = _gguf_config(file)
    except (OSError, ValueError, KeyError, TypeError, NotImplementedError) as error:
        return None, f"{NO_VIEW}: the model in {file.name} cannot be read: {first_line(error)}"
    return view_positions(config)


def _gguf_model(file: Path):
    """The model of a GGUF file as a float32 ``transformers`` causal LM, or None and why; the tensors
    get Hugging Face names from the model built on the ``meta`` device (no memory)."""
    import torch
    import transformers
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    with quiet_transformers(), contextlib.redirect_stderr(io.StringIO()):
        try:
            config = load_gguf_checkpoint(str(file))["config"]
            _, why = view_positions(config)
            if why is not None:
                return None, why
            with torch.device("meta"):
                names = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
            tensors = load_gguf_checkpoint(str(file), return_tensors=True, model_to_load=names)["tensors"]
        except (OSError, ValueError, KeyError, TypeError, NotImplementedError) as error:
            return None, f"{NO_VIEW}: the model in {file.name} cannot be read: {first_line(error)}"
    return built_model(lambda: model_from_state(config, tensors, str(file)))

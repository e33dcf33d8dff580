"""A GGUF file (llama.cpp's format), or the name of a fetched one (``smollm2``: SmolLM2-135M-Instruct,
Q4_1, SPEC §10).

The embedding tensor ``token_embd.weight`` is read and dequantised with ``gguf`` — the routine
``transformers`` uses when it loads the whole model (identical values) — without building the
model; the tokenizer comes from ``transformers`` (``gguf_file=``). For a Llama GGUF file the whole
network is read by ``transformers``' own GGUF reader (``load_gguf_checkpoint``: the tensors
dequantised and the query/key rows of llama.cpp's RoPE layout put back, as
``from_pretrained(gguf_file=...)`` does, without its ``accelerate`` requirement).
"""

from __future__ import annotations

import contextlib
import functools
import io
from pathlib import Path

import numpy as np

from ctxstair.errors import InputError
from ctxstair.lm.checkpoints.base import NEEDS_LLAMA, Checkpoint, Entry, built_model, first_line, quiet_transformers
from ctxstair.lm.tokenizer import TextTokenizer

#: The input-embedding tensor of a GGUF file (llama.cpp naming, every architecture).
GGUF_EMBEDDING = "token_embd.weight"


class GGUFSource:
    """One GGUF file: a single checkpoint (module docstring)."""

    def __init__(self, file: Path, name: str | None = None):
        self.file, self.name = file, name or str(file)
        self.tokenizer = _tokenizer(file)
        self.vocab_rows = self.embeddings.shape[0]
        self.positions, self.no_model = _positions(file)

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
    """``(max_seq_len, None)`` of a Llama GGUF file, else ``(None, why)``."""
    from ctxstair.models.decoder_hf import decoder_config_from_hf

    try:
        config = _gguf_config(file)
    except (OSError, ValueError, KeyError, TypeError, NotImplementedError) as error:
        return None, f"{NEEDS_LLAMA}, and the model in {file.name} cannot be read: {first_line(error)}"
    if config.get("model_type") != "llama":
        return None, f"{NEEDS_LLAMA}: {file.name} holds a {config.get('model_type')!r} model"
    try:
        return decoder_config_from_hf(config, pretrained=True).max_seq_len, None
    except InputError as error:
        return None, f"{NEEDS_LLAMA}: {error}"


def _gguf_model(file: Path):
    """The Llama model of a GGUF file as a float32 DecoderLM, or None and why; the name map is taken
    from a Llama model built on the ``meta`` device (no memory)."""
    import torch
    import transformers
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    from ctxstair.models.decoder_hf import from_hf_weights

    with quiet_transformers(), contextlib.redirect_stderr(io.StringIO()):
        try:
            config = load_gguf_checkpoint(str(file))["config"]
            if config.get("model_type") != "llama":
                return None, f"{NEEDS_LLAMA}: {file.name} holds a {config.get('model_type')!r} model"
            with torch.device("meta"):
                names = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
            tensors = load_gguf_checkpoint(str(file), return_tensors=True, model_to_load=names)["tensors"]
        except (OSError, ValueError, KeyError, TypeError, NotImplementedError) as error:
            return None, f"{NEEDS_LLAMA}, and the model in {file.name} cannot be read: {first_line(error)}"
    model, why = built_model(lambda: from_hf_weights(config, {name: t.to(torch.float32)
                                                               for name, t in tensors.items()}))
    return model, None if why is None else f"{NEEDS_LLAMA}: {why}"


def _tokenizer(file: Path) -> TextTokenizer:
    """The tokenizer stored in a GGUF file's metadata, rebuilt by ``transformers``."""
    from transformers import AutoTokenizer

    with quiet_transformers():
        try:
            # trust_remote_code=False: a tokenizer_config.json next to the file may name custom code.
            tokenizer = AutoTokenizer.from_pretrained(file.parent, gguf_file=file.name, trust_remote_code=False)
        except (OSError, ValueError, KeyError) as error:
            raise InputError(f"cannot read the tokenizer of {file}: {first_line(error)}") from None
    return TextTokenizer.from_transformers(tokenizer)

"""What every checkpoint source yields (SPEC §7): :class:`Checkpoint` and :class:`Entry`, the
:class:`Source` interface, and the small helpers the sources share."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ctxstair.errors import InputError

if TYPE_CHECKING:
    from ctxstair.lm.tokenizer import TextTokenizer
    from ctxstair.models import DecoderLM

#: Why the attention-path and path-share measures are missing for a model that is not Llama-family.
NEEDS_LLAMA = "the attention-path and path-share measures need a Llama-family model"


@dataclass(frozen=True)
class Checkpoint:
    """One model state, read.

    Attributes:
        name: what it is (a directory, file, snapshot or revision name).
        step: its training step, None for a single model or a revision such as ``main``.
        W_E: (V, d) input-embedding rows, float32 (float64 if stored so; bf16 and fp16 as float32);
            V may exceed the tokenizer's vocabulary (padded embedding matrices).
        model: with ``models=True``, the whole network as a float32 :class:`~ctxstair.models.DecoderLM`
            in eval mode when it is a Llama-family model; else None.
        no_model: why ``model`` is None (None when it is not, or when models were not asked for).
        info: what the source records of where the weights came from (a Hub revision's ``commit``
            and how its ``weights`` were read).
    """

    name: str
    step: int | None
    W_E: np.ndarray
    model: DecoderLM | None = None
    no_model: str | None = None
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Entry:
    """A checkpoint of a source, named but not read: ``load(models)`` reads it (:class:`Checkpoint`)."""

    name: str
    step: int | None
    load: Callable[[bool], Checkpoint]


class Source(Protocol):
    """A checkpoint source: a Hugging Face folder, a folder of ``checkpoint-<step>`` folders, a GGUF
    file, an LM run directory of ours, or revisions of a Hub model.

    Attributes:
        name: what was asked for, as the user wrote it.
        tokenizer: the tokenizer every checkpoint is measured with.
        vocab_rows: V, the rows of the input embedding (known before any weight is read).
        positions: the model's ``max_seq_len`` when it is Llama-family (the measure of its attention
            paths), else None, with ``no_model`` saying why.
    """

    name: str
    tokenizer: TextTokenizer
    vocab_rows: int
    positions: int | None
    no_model: str | None

    def entries(self) -> list[Entry]:
        """Its checkpoints in step order, not yet read."""


def weight_array(weight) -> np.ndarray:
    """A torch weight as numpy: float32 and float64 as they are, other floats (bf16) as float32."""
    import torch

    weight = weight.detach().cpu()
    return (weight if weight.dtype in (torch.float32, torch.float64) else weight.float()).numpy()


def built_model(build: Callable[[], DecoderLM]) -> tuple[DecoderLM | None, str | None]:
    """``(build(), None)``, or ``(None, why)`` when it raises InputError."""
    try:
        return build(), None
    except InputError as error:
        return None, str(error)


def llama_positions(config) -> tuple[int | None, str | None]:
    """``(max_seq_len, None)`` of a ``transformers`` config that a :class:`~ctxstair.models.DecoderLM`
    can hold (Llama-family), else ``(None, why)``."""
    from ctxstair.models.decoder_hf import decoder_config_from_hf

    try:
        return decoder_config_from_hf(config, pretrained=True).max_seq_len, None
    except InputError as error:
        return None, f"{NEEDS_LLAMA}: {error}"


def read_json_file(file: Path) -> object:
    """The parsed JSON of ``file``; InputError naming it if unreadable."""
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"cannot read {file}: {first_line(error)}") from None


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence ``transformers`` warnings and progress bars for one load, then restore them."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type name when the message is empty), for one-line errors."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def embedding_parameter(config) -> tuple[str, str, tuple[int, ...]]:
    """(parameter name, base-model prefix, shape) of ``get_input_embeddings().weight`` of the causal LM of
    a ``transformers`` config, built on the ``meta`` device: no memory, no weights."""
    import torch
    from transformers import AutoModelForCausalLM

    with quiet_transformers(), torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
        except (ValueError, KeyError, ImportError, TypeError) as error:
            raise InputError(f"cannot build a causal LM from the config {type(config).__name__}: "
                             f"{first_line(error)}") from None
    weight = model.get_input_embeddings().weight
    name = next(name for name, parameter in model.named_parameters() if parameter is weight)
    return name, model.base_model_prefix, tuple(weight.shape)


def embedding_sha256(W_E: np.ndarray) -> str:
    """SHA-256 (hex) of an input-embedding matrix (V, d) as read: its dtype, shape and C-order bytes.

    The matrix alone is hashed, not its file, so two revisions whose files differ elsewhere (other
    shards, metadata) but serve the same embedding hash the same. bf16 and fp16 are widened to
    float32 exactly (an injective map), so equal hashes mean equal stored embeddings.
    """
    array = np.ascontiguousarray(W_E)
    digest = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
    digest.update(array.view(np.uint8).reshape(-1).data)
    return digest.hexdigest()


#: The parts of a ``tokenizer.json`` that do not change which ids a text gets: left out of its hash.
_TOKENIZER_RUNTIME = ("truncation", "padding")


@dataclass(frozen=True)
class TokenizerIdentity:
    """What a ``tokenizer.json`` encodes with (:func:`tokenizer_identity`).

    Attributes:
        sha256: of its canonical JSON (keys sorted) without truncation and padding settings.
        vocab_size: its token ids, added tokens included.
        sections: top-level key -> SHA-256 of that part, to name what differs.
    """

    sha256: str
    vocab_size: int
    sections: dict[str, str]

    def differing(self, other: TokenizerIdentity) -> list[str]:
        """The top-level parts (``model``, ``added_tokens``, ``normalizer``...) that differ from ``other``'s."""
        return sorted(name for name in {*self.sections, *other.sections}
                      if self.sections.get(name) != other.sections.get(name))


def tokenizer_identity(file: Path) -> TokenizerIdentity:
    """The :class:`TokenizerIdentity` of a ``tokenizer.json``; InputError naming it if unreadable."""
    from ctxstair.lm.tokenizer import TextTokenizer

    content = read_json_file(file)
    if not isinstance(content, dict):
        raise InputError(f"{file} is not a tokenizer.json (a JSON object)")
    content = {name: part for name, part in content.items() if name not in _TOKENIZER_RUNTIME}

    def sha(part: object) -> str:
        return hashlib.sha256(json.dumps(part, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()

    return TokenizerIdentity(sha(content), TextTokenizer.load(file).vocab_size,
                             {name: sha(part) for name, part in content.items()})


def check_tokenizers(series: str, first: tuple[str, Path], others: list[tuple[str, Path | None]],
                     kind: str = "") -> tuple[str, dict[str, str]]:
    """``(sha256, checks)``: the first checkpoint's tokenizer hash, and per other checkpoint name
    ``"same as <first>"`` or why it was not compared (``None``: it has no ``tokenizer.json``). A
    checkpoint whose tokenizer has another vocabulary size, or encodes differently
    (:func:`tokenizer_identity`), is an InputError naming it (``<kind><name> of <series>``), the first,
    and what differs: the checkpoints of one series must read text as the same ids."""
    first_name, first_file = first
    reference = tokenizer_identity(first_file)
    checks = {}
    for name, file in others:
        if file is None:
            checks[name] = "not compared: no tokenizer.json"
            continue
        other = tokenizer_identity(file)
        if other.vocab_size != reference.vocab_size:
            raise InputError(f"{kind}{name} of {series} has a tokenizer of {other.vocab_size} tokens, not the "
                             f"{reference.vocab_size} of {first_name}: not one series")
        if other.sha256 != reference.sha256:
            raise InputError(f"{kind}{name} of {series} has a tokenizer unlike {first_name}'s (its tokenizer.json "
                             f"differs in {', '.join(other.differing(reference))}): not one series")
        checks[name] = f"same as {first_name}"
    return reference.sha256, checks

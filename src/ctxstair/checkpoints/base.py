"""What every checkpoint source yields (SPEC §7): :class:`Checkpoint` and :class:`Entry`, the
:class:`Source` interface, and the small helpers the sources share."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ctxstair.errors import InputError

if TYPE_CHECKING:
    import torch

    from ctxstair.text.tokenizer import TextTokenizer

#: How every reason for missing attention-path and path-share measures begins: the model's family has
#: no view (:func:`ctxstair.models.view.adapter_of` says which families have one), or no model was read.
NO_VIEW = "no model view"


@dataclass(frozen=True)
class Checkpoint:
    """One model state, read.

    Attributes:
        name: what it is (a directory, file, snapshot or revision name).
        step: its training step, None for a single model or a revision such as ``main``.
        W_E: (V, d) input-embedding rows, float32 (float64 if stored so; bf16 and fp16 as float32);
            V may exceed the tokenizer's vocabulary (padded embedding matrices).
        model: with ``models=True``, the whole network in float32 and eval mode, as it is — a
            ``transformers`` causal LM of a family with a view (:mod:`ctxstair.models.view`) — our
            runs' models are such models too —; else None.
        no_model: why ``model`` is None (None when it is not, or when models were not asked for).
        info: what the source records of where the weights came from (a Hub revision's ``commit``
            and how its ``weights`` were read).
    """

    name: str
    step: int | None
    W_E: np.ndarray
    model: torch.nn.Module | None = None
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
        positions: the model's longest window when its family has a view (the measure of its
            attention paths), else None, with ``no_model`` saying why.
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


def built_model(build: Callable[[], torch.nn.Module]) -> tuple[torch.nn.Module | None, str | None]:
    """``(build(), None)``, or ``(None, why)`` when it raises InputError."""
    try:
        return build(), None
    except InputError as error:
        return None, str(error)


def view_positions(config) -> tuple[int | None, str | None]:
    """``(longest window, None)`` of a ``transformers`` config (object or dict) whose family has a
    view, else ``(None, why)`` — decided from the config alone, before any weight is read."""
    from transformers import AutoConfig

    from ctxstair.models.view import adapter_of, positions_of

    try:
        adapter_of(config)
    except InputError as error:
        return None, str(error)
    if isinstance(config, dict):  # a GGUF file's: the family's defaults fill what its metadata leaves out
        config = AutoConfig.for_model(**config)
    return positions_of(config), None


def model_from_state(config, state: dict[str, torch.Tensor], where: str) -> torch.nn.Module:
    """The ``transformers`` causal LM of ``config`` (a config object or its dict) holding ``state``
    (Hugging Face parameter names), float32, eval mode; a tied unembedding may be absent from
    ``state``. InputError naming ``where`` when ``state`` is not the model's whole state."""
    import torch
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig

    from ctxstair.text.tokenizer import quiet_transformers

    if isinstance(config, dict):
        config = AutoConfig.for_model(**config)
    with quiet_transformers():
        # Built on the CPU with its own buffers (rotary frequencies, scales), then every weight replaced. The
        # class itself, not AutoModelForCausalLM.from_config: inside a DeepSpeed ZeRO-3 job that would partition
        # the copy's parameters across the ranks.
        model = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)](config).to(torch.float32)
    expected = model.state_dict()
    state = _renamed(model, state, expected, where)
    embedding = model.get_input_embeddings().weight.data_ptr()
    tied = {name for name, value in expected.items() if value.data_ptr() == embedding} - set(state)
    missing = sorted(set(expected) - set(state) - tied)
    if missing:
        raise InputError(f"{where} lacks {len(missing)} tensor(s) of its {config.model_type} model, e.g. {missing[0]}")
    model.load_state_dict({name: state[name].to(torch.float32) for name in expected if name in state}, strict=False)
    return model.eval()


def _renamed(model, state: dict, expected: dict, where: str) -> dict:
    """``state`` under the names ``model`` has: the renamings ``transformers`` applies when it loads a
    checkpoint (e.g. GPT-NeoX's stored ``embed_out`` is its ``lm_head``; GPT-2's stored names lack the
    ``transformer.`` prefix). A tensor that needs one of its converters (tensors fused or split on
    load) is refused, naming ``where``."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightRenaming, rename_source_key

    transforms = get_model_conversion_mapping(model)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if not isinstance(t, WeightRenaming)]
    renamed = {}
    for key, tensor in state.items():
        name, converter = rename_source_key(key, renamings, converters, model.base_model_prefix, expected)
        if converter is not None:
            raise InputError(f"{where}: tensor {key} is converted by transformers on load, which is not supported here")
        renamed[name] = tensor
    return renamed


def read_json_file(file: Path) -> object:
    """The parsed JSON of ``file``; InputError naming it if unreadable."""
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise InputError(f"cannot read {file}: {first_line(error)}") from None


def first_line(error: BaseException) -> str:
    """The first line of an error's message (its type name when the message is empty), for one-line errors."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def embedding_parameter(config) -> tuple[str, str, tuple[int, ...]]:
    """(parameter name, base-model prefix, shape) of ``get_input_embeddings().weight`` of the causal LM of
    a ``transformers`` config, built on the ``meta`` device: no memory, no weights."""
    import torch
    from transformers import AutoModelForCausalLM

    from ctxstair.text.tokenizer import quiet_transformers

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
    from ctxstair.text.tokenizer import TextTokenizer

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

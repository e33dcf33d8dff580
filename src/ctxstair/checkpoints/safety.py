"""The safe-loading rules of every checkpoint source, in one place.

* Weights are read from safetensors. A Hugging Face folder whose weights ``from_pretrained`` would
  read are pickles (``pytorch_model.bin``, ``*.pt`` ...) is refused before ``transformers`` sees it
  (:func:`check_safe_weights`): unpickling can run code.
* The one exception is a Hub revision that has no safetensors at all (old releases): its state dict
  is read through PyTorch's restricted unpickler, ``torch.load(weights_only=True)``, which builds
  tensors and plain containers only (:func:`restricted_state_dict`); the result says so.
* ``trust_remote_code`` is always False, so a folder whose config names custom code is refused,
  and ``from_pretrained`` is always given ``use_safetensors=True``.
* Our own run directories are read through :class:`ctxstair.run.Run`, whose snapshots carry SHA-256
  hashes checked on every load.

``tests/reliability/test_reliability_safe_loading.py`` scans the whole package for these rules and
feeds malicious files to every loader.
"""

from __future__ import annotations

from pathlib import Path

from ctxstair.checkpoints.base import first_line, read_json_file
from ctxstair.errors import InputError

#: The weight files of a Hugging Face folder that ``from_pretrained`` reads without unpickling.
SAFE_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
#: Suffixes of pickled weight files (``torch.save``), named in the refusal when no safetensors exist.
PICKLED_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


def check_safe_weights(folder: Path) -> None:
    """InputError unless every weight file ``from_pretrained`` would read in ``folder`` is safetensors.

    Checked here, before ``transformers``, because what it reads depends on its version and on the
    folder: ``pytorch_model.bin`` when no safetensors exist (older versions unpickle it in full),
    the file named by ``transformers_weights`` in ``config.json``, or the shards of an index.
    Other pickles in the folder (a Trainer checkpoint's ``optimizer.pt``, ``training_args.bin``)
    are never read, so they do not matter.
    """
    config = read_json_file(folder / "config.json")
    named = config.get("transformers_weights") if isinstance(config, dict) else None
    if named is not None and not str(named).endswith((".safetensors", ".safetensors.index.json")):
        raise InputError(f"{folder / 'config.json'} names the weights file {named!r}, which is not safetensors; "
                         "ctxstair does not load pickled weights: convert the model to safetensors")
    weights = folder / (str(named) if named is not None else next(
        (name for name in SAFE_WEIGHTS if (folder / name).is_file()), SAFE_WEIGHTS[0]))
    if weights.name.endswith(".index.json") and weights.is_file():
        index = read_json_file(weights)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        shards = sorted({str(shard) for shard in weight_map.values()}) if isinstance(weight_map, dict) else []
        unsafe = [shard for shard in shards if not shard.endswith(".safetensors")]
        if not shards or unsafe:
            raise InputError(f"{weights} lists {'the shard ' + repr(unsafe[0]) if unsafe else 'no shards'}; "
                             "ctxstair loads safetensors shards only (pickled weights are never loaded)")
    elif not weights.is_file():
        pickled = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix in PICKLED_WEIGHTS)
        if pickled:
            raise InputError(f"{folder / pickled[0]} holds pickled weights, which ctxstair does not load (unpickling "
                             "can run code); convert the model to safetensors (model.safetensors)")
        raise InputError(f"{folder} has no {weights.name}: ctxstair reads Hugging Face weights from safetensors only")


def restricted_state_dict(file: Path) -> dict:
    """A pickled state dict through PyTorch's restricted unpickler (tensors and plain containers only,
    no code), memory-mapped so that only the tensors read are paged in."""
    import torch

    try:
        state = torch.load(file, weights_only=True, map_location="cpu", mmap=True)
    # Any failure means a file we will not read: torch raises UnpicklingError (without our importing
    # pickle, which the safe-loading check forbids) for anything beyond tensors, others for corrupt files.
    except Exception as error:
        raise InputError(f"cannot read the pickled weights {file.name} with torch.load(weights_only=True): "
                         f"{first_line(error)}") from None
    if not isinstance(state, dict):
        raise InputError(f"{file.name} holds a {type(state).__name__}, not a state dict")
    return state

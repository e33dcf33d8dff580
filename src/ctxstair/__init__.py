"""ctxstair: probability signatures, embedding alignment and the Context Staircase.

Data flows one way: ``tasks`` (datasets) -> ``signatures`` (statistics of the data, SPEC §2)
-> ``alignment`` (embedding geometry against signature geometry, SPEC §3).

Importing the package, or any module of it, changes nothing in the process: no thread count, no
deterministic-algorithms flag, no environment variable (a training script that imports
``ctxstair.monitor`` computes the same weights as without it). The ``ctxstair`` command and the
trainers set the floating-point mode they promise (:mod:`ctxstair.numerics`); in a notebook,
``ctxstair.numerics.configure()`` before numpy and torch load does the same. The sub-packages load
on first use, so ``import ctxstair`` itself loads neither numpy nor torch.
"""

import importlib

from ctxstair.errors import InputError, TooLargeError

__version__ = "0.1.0"
__all__ = ["alignment", "signatures", "tasks", "InputError", "TooLargeError", "__version__"]
_SUBPACKAGES = ("alignment", "signatures", "tasks")


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"ctxstair.{name}")
    raise AttributeError(f"module 'ctxstair' has no attribute {name!r}")

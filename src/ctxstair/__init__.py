"""ctxstair: probability signatures, embedding alignment and the Context Staircase.

Data flows one way: ``tasks`` (datasets) -> ``signatures`` (statistics of the data, SPEC §2)
-> ``alignment`` (embedding geometry against signature geometry, SPEC §3).

Importing the package first fixes the process's threads and floating-point code paths
(:mod:`ctxstair.numerics`, read by numpy and torch when they load), then loads its sub-packages
on first use, so ``import ctxstair`` itself loads neither numpy nor torch.
"""

import contextlib
import importlib

from ctxstair import numerics
from ctxstair.errors import InputError, TooLargeError

# A malformed CTXSTAIR_* variable: reported where it is next read (the command line's one-line error).
with contextlib.suppress(InputError):
    numerics.configure()

__version__ = "0.1.0"
__all__ = ["alignment", "signatures", "tasks", "InputError", "TooLargeError", "__version__"]
_SUBPACKAGES = ("alignment", "signatures", "tasks")


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"ctxstair.{name}")
    raise AttributeError(f"module 'ctxstair' has no attribute {name!r}")

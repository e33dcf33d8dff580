"""ctxstair: probability signatures, embedding alignment and the Context Staircase.

Data flows one way: ``tasks`` (datasets) -> ``signatures`` (statistics of the data, SPEC §2)
-> ``alignment`` (embedding geometry against signature geometry, SPEC §3).
"""

from ctxstair import alignment, signatures, tasks  # noqa: F401
from ctxstair.errors import InputError, TooLargeError

__version__ = "0.1.0"
__all__ = ["alignment", "signatures", "tasks", "InputError", "TooLargeError", "__version__"]

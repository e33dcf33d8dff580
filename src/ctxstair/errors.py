"""Errors of ctxstair. Bad input raises :class:`InputError` (a ``ValueError``; the command line
exits with code 2); a run that fails while it trains raises :class:`RunFailed` (exit code 1)."""


class InputError(ValueError):
    """An argument is invalid; the message names the argument and what is allowed."""


class TooLargeError(InputError):
    """A dense result would exceed the memory budget; raised before anything is allocated."""


class RunFailed(RuntimeError):
    """A run stopped before its end for a reason found while running; ``run_dir`` keeps what was
    written up to then, with ``failure.json`` saying why."""

    def __init__(self, message: str, run_dir=None):
        super().__init__(message)
        self.run_dir = run_dir


class TrainingDiverged(RunFailed):
    """The loss or a parameter became NaN or infinite."""

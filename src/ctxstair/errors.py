"""Errors raised for bad input. Both subclass ``ValueError`` so callers may catch either."""


class InputError(ValueError):
    """An argument is invalid; the message names the argument and what is allowed."""


class TooLargeError(InputError):
    """A dense result would exceed the memory budget; raised before anything is allocated."""

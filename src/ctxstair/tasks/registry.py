"""Task registry: ``make(name, **params)`` builds a :class:`Dataset`; ``list()`` describes every task.

A task is a generator function registered with :func:`register`. Its keyword parameters, their
defaults and the first paragraph of its docstring are what ``list()`` and the CLI show. Unknown
names or parameters, and parameters of the wrong type, raise :class:`~ctxstair.errors.InputError`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctxstair.errors import InputError, TooLargeError
from ctxstair.tasks.dataset import Dataset

_REGISTRY: dict[str, Callable[..., Dataset]] = {}


@dataclass(frozen=True)
class TaskInfo:
    """Description of one registered task: its name, one-line summary and parameter defaults."""

    name: str
    summary: str
    params: dict[str, Any]
    doc: str


def register(name: str) -> Callable[[Callable[..., Dataset]], Callable[..., Dataset]]:
    """Decorator adding a generator to the registry under ``name``."""

    def add(fn: Callable[..., Dataset]) -> Callable[..., Dataset]:
        if name in _REGISTRY:
            raise RuntimeError(f"task {name!r} registered twice")
        _REGISTRY[name] = fn
        return fn

    return add


def _info(name: str) -> TaskInfo:
    fn = _REGISTRY[name]
    doc = inspect.getdoc(fn) or ""
    params = {p.name: p.default for p in inspect.signature(fn).parameters.values()}
    return TaskInfo(name=name, summary=doc.split("\n\n")[0].replace("\n", " "), params=params, doc=doc)


def list_tasks() -> list[TaskInfo]:
    """Every registered task (SPEC §8, §9), sorted by name."""
    return [_info(name) for name in sorted(_REGISTRY)]


def make(name: str, **params: Any) -> Dataset:
    """Build the dataset of task ``name`` (SPEC §8, §9) with ``params`` (defaults for the rest).

    Parameters are checked against the generator's signature: an unknown one, or a value whose type
    does not match the default's (int for int, float accepts int, tuple/list for tuples), raises
    InputError naming the parameter and the allowed ones. A dataset above the memory budget
    (:func:`~ctxstair.checks.default_max_bytes`) raises TooLargeError naming the given parameters,
    before it is allocated. The same parameters give the same bytes.
    """
    if name not in _REGISTRY:
        raise InputError(f"unknown task {name!r}; available tasks: {', '.join(sorted(_REGISTRY))}")
    defaults = _info(name).params
    for key, value in params.items():
        if key not in defaults:
            raise InputError(f"unknown parameter {key!r} for task {name!r}; allowed: {', '.join(defaults)}")
        params[key] = _coerce(name, key, value, defaults[key])
    resolved = {**defaults, **params}
    try:
        dataset = _REGISTRY[name](**resolved)
    except TooLargeError as error:
        given = ", ".join(f"{k}={v!r}" for k, v in params.items()) or "its default parameters"
        raise TooLargeError(f"task {name!r} with {given}: {error}") from None
    return Dataset(
        X=dataset.X, y=dataset.y, vocab_size=dataset.vocab_size, tokens=dataset.tokens,
        name=name, params=resolved, meta=dataset.meta,
    )


def _coerce(task: str, key: str, value: Any, default: Any) -> Any:
    """Match ``value`` to the type of ``default``; refuse a mismatch with a clear message."""
    kind = type(default)
    ok = True
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, (tuple, list)):
        ok = isinstance(value, (tuple, list))
        value = tuple(value) if ok else value
    elif default is not None:
        ok = isinstance(value, kind)
    if not ok:
        raise InputError(
            f"parameter {key!r} of task {task!r} must be of type {kind.__name__} (default {default!r}), got {value!r}"
        )
    return value

"""The grid of a sweep: ``--grid key=v1,v2,...`` options and the cells of their product.

    parse_grid(["model.init.gamma=0.5,1,2", "model.d=64,128"])
    # {"model.init.gamma": [0.5, 1, 2], "model.d": [64, 128]}
    grid_cells(grid)   # 6 cells, the last key varying fastest

Each value is read as a YAML scalar or list, like ``--set`` (:func:`ctxstair.config.parse_value`);
commas inside brackets belong to a list value (``model.coeffs=[1,1],[1,0.5]`` is two values).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

from ctxstair.config import parse_value, split_assignment
from ctxstair.errors import InputError


@dataclass(frozen=True)
class Cell:
    """One grid point: ``overrides`` (grid key -> value) and a file-system-safe ``name`` built from them."""

    name: str
    overrides: dict[str, Any]


def parse_grid(items: list[str]) -> dict[str, list[Any]]:
    """``["key=v1,v2", ...]`` -> ``{key: [v1, v2], ...}`` in the given order.

    InputError for an item without ``=``, an empty value, a repeated key or a repeated value."""
    if not items:
        raise InputError("a sweep needs at least one --grid key=v1,v2,...")
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, raw = split_assignment(item, "--grid", "key=v1,v2,...")
        if key in grid:
            raise InputError(f"--grid gives {key!r} twice")
        values = [_value(text, item) for text in _split_top_level(raw)]
        if len({repr(v) for v in values}) != len(values):
            raise InputError(f"--grid {key} repeats a value: {raw!r}")
        grid[key] = values
    return grid


def grid_cells(grid: dict[str, list[Any]]) -> list[Cell]:
    """Every combination of the grid's values (``itertools.product`` order), each with its name."""
    return [Cell(_cell_name(dict(zip(grid, combo))), dict(zip(grid, combo)))
            for combo in itertools.product(*grid.values())]


def _split_top_level(raw: str) -> list[str]:
    """Split at commas that are not inside ``[...]``."""
    parts, depth, current = [], 0, ""
    for char in raw:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return parts + [current]


def _value(text: str, item: str) -> Any:
    if not text.strip():
        raise InputError(f"--grid {item!r} has an empty value")
    return parse_value(text.strip())


def _cell_name(overrides: dict[str, Any]) -> str:
    """``model.init.gamma=0.5__model.d=64``: characters other than letters, digits and ``._=-`` become ``_``."""
    text = "__".join(f"{key}={value}" for key, value in overrides.items())
    return re.sub(r"[^A-Za-z0-9._=-]", "_", text.replace(" ", ""))

"""Command-line overrides: ``--set key=value`` pairs parsed into typed Python values."""

from __future__ import annotations

from typing import Any

import yaml

from ctxstair.errors import InputError


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """Parse ``["N=40", "law=poisson", "shifts=[5,1,-2,-8]"]`` into ``{"N": 40, ...}``.

    Values are read as YAML scalars or lists (ints, floats, booleans, strings, ``[a, b]``); a
    malformed item or a repeated key raises InputError naming it.
    """
    parsed: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"--set expects key=value, got {item!r}")
        if key in parsed:
            raise InputError(f"--set gives {key!r} twice")
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        parsed[key] = raw if isinstance(value, dict) or value is None else value
    return parsed

"""Shared pytest setup: tests marked ``slow`` (full-size experiments) run only when asked for
with ``pytest -m slow``; the default run skips them."""

import pytest


def pytest_collection_modifyitems(config, items):
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="full-size experiment: opt in with `pytest -m slow`")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)

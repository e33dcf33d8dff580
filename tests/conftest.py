"""Shared pytest setup: opt-in tests. Tests marked ``extended`` (the slowest tests, left out of the
default suite so that `make test` stays within its time) run only with ``pytest -m extended`` (`make
test-extended`, which CI runs after `make test`), tests marked ``slow`` (full-size experiments) only
with ``pytest -m slow``, tests marked ``stress`` (thirty kills under load, ≈ 12 min) only with
``pytest -m stress`` (`make stress`, which CI runs too); the default run skips them and says so."""

import os
import subprocess
import sys

import pytest

from ctxstair import numerics, progress

# First, so that numpy and torch load with the floating-point set-up of the `ctxstair` command, and
# figures are drawn off-screen as the command draws them.
numerics.configure()
os.environ.setdefault("MPLBACKEND", "Agg")
# Progress lines are timed by the wall clock (ctxstair.progress): on a loaded machine a command could
# pass the 30 s interval and log a line before its error's one line. The tests that read stderr see
# no progress line unless they set the interval themselves (tests/test_progress.py); every command
# they start, in this process or in a child, inherits this.
os.environ[progress.INTERVAL_VARIABLE] = str(10**9)

OPT_IN = {"extended": "in the extended suite, which CI runs: opt in with `pytest -m extended` (make test-extended)",
          "slow": "full-size experiment: opt in with `pytest -m slow`",
          "stress": "kill-and-resume stress test under load: opt in with `pytest -m stress` (make stress)"}


def pytest_collection_modifyitems(config, items):
    asked = config.getoption("markexpr") or ""
    for marker, reason in OPT_IN.items():
        if marker in asked:
            continue
        for item in items:
            if marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def busy_core():
    """A process spinning on the last usable core for the test's duration (at most 20 minutes)."""
    core = max(os.sched_getaffinity(0))
    burner = subprocess.Popen([sys.executable, "-c", f"import os, time\nos.sched_setaffinity(0, {{{core}}})\n"
                               "end = time.monotonic() + 1200\nwhile time.monotonic() < end: pass"])
    yield
    burner.kill()
    burner.wait()

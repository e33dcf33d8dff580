"""Finished outputs that several reliability modules read: built once per session, never changed (a
test that damages or edits one works on a copy)."""

import pytest
from short_runs import SHORT_LM, SHORT_RUN

from ctxstair.cli import main


@pytest.fixture(scope="session")
def finished(tmp_path_factory):
    """A complete recipe run: trained, analysed, reported."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main([*SHORT_RUN, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def finished_lm(tmp_path_factory):
    """A complete LM run: trained, analysed (``lm_analysis.csv``), reported, exported."""
    out = tmp_path_factory.mktemp("finished_lm") / "run"
    assert main([*SHORT_LM, "--out", str(out)]) == 0
    return out

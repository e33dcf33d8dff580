"""Kill safety: SIGKILL at twelve moments of `ctxstair run`, `ctxstair lm train`
and `ctxstair sweep`, each followed by the same command with `--resume`, ends with exactly the files
of an uninterrupted run; after every kill, each visible file is complete.

Each command is first run once without interruption (the reference, its wall time T). Then the
same command with `--resume` is started again and again and killed after T·u, u drawn from
U(0.15, 0.95) with a fixed seed — during start-up, training, analysis or the report, wherever that
lands — until twelve kills have interrupted it; an attempt that finishes before its kill completes
that directory, which is compared with the reference, and the attempts go on in a new one; after
the twelfth kill a last `--resume` runs to the end. (`--resume` of a directory that does not exist
yet starts the run, so every attempt is literally the same command.) The runs use one torch
thread; tests/reliability/test_reliability_stress.py repeats this with every core busy.
"""

import pytest
from kill_harness import SMALL_RUN, TINY_LM, command, environment, kill_and_resume, run_to_end

pytestmark = pytest.mark.extended  # ≈ 4 min on 2 cores: `make test-extended`, run by CI


def test_kill_and_resume_ctxstair_run(tmp_path):
    argv = lambda out: command("run", "staircase-add", "--seeds", "2", *SMALL_RUN, "--out", str(out))  # noqa: E731
    seconds = run_to_end(argv(tmp_path / "reference"), environment())
    kill_and_resume(argv, tmp_path, tmp_path / "reference", seconds, seed=1)


def test_kill_and_resume_ctxstair_lm_train(tmp_path):
    argv = lambda out: command("lm", "train", *TINY_LM, "--out", str(out))  # noqa: E731
    seconds = run_to_end(argv(tmp_path / "reference"), environment())
    kill_and_resume(argv, tmp_path, tmp_path / "reference", seconds, seed=2)


def test_kill_and_resume_ctxstair_sweep(tmp_path):
    """Two cells in a pool of two worker processes: a killed sweep also takes its workers down
    (they would otherwise go on writing the cell that --resume continues)."""
    argv = lambda out: command("sweep", "staircase-add", "--grid", "model.init.gamma=0.5,1.5", "--seeds", "2",  # noqa: E731
                               "--workers", "2", *SMALL_RUN, "--out", str(out))
    seconds = run_to_end(argv(tmp_path / "reference"), environment())
    kill_and_resume(argv, tmp_path, tmp_path / "reference", seconds, seed=3)

"""Bitwise reproducibility under load: SIGKILL at thirty seeded moments of `ctxstair run
staircase-add` and of `ctxstair lm train`, each followed by `--resume`, while a CPU burner keeps
another core busy, ends with exactly the files of an uninterrupted run of the same command (made
under the same load).

Unlike test_reliability_kill.py, the commands run with ctxstair's default thread count (every
usable core), so the burner competes with their threads: a library that sized its thread team from
the load, or a result that depended on where an array happened to land in memory, would show up as
a differing byte (see ctxstair.numerics for what makes this hold).
"""

import pytest

from kill_harness import TINY_LM, command, environment, kill_and_resume, run_to_end

pytestmark = pytest.mark.stress  # ≈ 9 min on 2 cores: `make stress`, run by CI after `make test`

STRESS_KILLS = 30
# The case that once differed after a resume on a loaded machine: staircase-add shortened to 400
# epochs, checkpointed at every snapshot.
SHORT_ADD = ["--set", "train.epochs=400"]


def test_thirty_kills_of_staircase_add_under_load_are_bitwise_identical(tmp_path, busy_core):
    env = environment(threads=None)
    argv = lambda out: command("run", "staircase-add", *SHORT_ADD, "--out", str(out))  # noqa: E731
    seconds = run_to_end(argv(tmp_path / "reference"), env)
    kill_and_resume(argv, tmp_path, tmp_path / "reference", seconds, seed=11, kills=STRESS_KILLS, env=env)


def test_thirty_kills_of_lm_train_under_load_are_bitwise_identical(tmp_path, busy_core):
    env = environment(threads=None)
    argv = lambda out: command("lm", "train", *TINY_LM, "--out", str(out))  # noqa: E731
    seconds = run_to_end(argv(tmp_path / "reference"), env)
    kill_and_resume(argv, tmp_path, tmp_path / "reference", seconds, seed=12, kills=STRESS_KILLS, env=env)

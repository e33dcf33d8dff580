"""Bitwise reproducibility under load: SIGKILL at thirty seeded moments of `ctxstair run
staircase-add` and of `ctxstair lm train` of a Llama and of a GPT-NeoX (and twelve of the attention
ensemble of `attention-arith`), each followed by `--resume`, while a CPU burner keeps
another core busy, ends with exactly the files of an uninterrupted run of the same command (made
under the same load).

Unlike test_reliability_kill.py, the commands run with ctxstair's default thread count (every
usable core), so the burner competes with their threads: a library that sized its thread team from
the load, a result that depended on where an array happened to land in memory, or a kernel that
adds in thread order (the attention model's indexing backward did, before torch's deterministic
kernels were turned on) would show up as a differing byte (see ctxstair.numerics).
"""

import pytest
from kill_harness import TINY_LM, command, environment, kill_and_resume, run_to_end

pytestmark = pytest.mark.stress  # ≈ 12 min on 2 cores: `make stress`, run by CI after `make test`

STRESS_KILLS = 30
# The case that once differed after a resume on a loaded machine: staircase-add shortened to 400
# epochs, checkpointed at every snapshot.
SHORT_ADD = ["--set", "train.epochs=400"]
# attention-arith with its three mod seeds, shortened: the runs that differed between identical calls.
SHORT_ATTENTION = ["--set", "train.epochs=300", "--set", "analysis.probe_steps=60"]


@pytest.mark.parametrize("args, kills, seed", [
    (["run", "staircase-add", *SHORT_ADD], STRESS_KILLS, 11),
    (["lm", "train", *TINY_LM, "--set", "model.family=llama"], STRESS_KILLS, 12),
    (["lm", "train", *TINY_LM, "--set", "model.family=gpt_neox"], STRESS_KILLS, 14),
    (["run", "attention-arith", *SHORT_ATTENTION], 12, 13),
], ids=["staircase-add", "lm-train-llama", "lm-train-gpt_neox", "attention-arith"])
def test_kills_under_load_leave_runs_bitwise_identical(tmp_path, busy_core, args, kills, seed):
    env = environment(threads=None)
    argv = lambda out: command(*args, "--out", str(out))  # noqa: E731
    seconds = run_to_end(argv(tmp_path / "reference"), env)
    kill_and_resume(argv, tmp_path, tmp_path / "reference", seconds, seed=seed, kills=kills, env=env)

"""Ctrl-C and SIGTERM: the command ends with one line saying what is kept and the exact command that
continues it (exit code 128 + the signal's number, no traceback), and that command finishes the run
with the files of an uninterrupted one."""

import shlex
import signal
import subprocess
import time

import numpy as np
import pytest
from kill_harness import SMALL_RUN, TINY_LM, assert_same_files, command, environment, run_to_end

CASES = {
    "run-SIGINT": (["run", "staircase-add", *SMALL_RUN], signal.SIGINT, "epoch"),
    "lm-train-SIGTERM": (["lm", "train", *TINY_LM], signal.SIGTERM, "step"),
}


def interrupted(argv: list[str], env: dict[str, str], signum: int, ready) -> tuple[int, str]:
    """Start ``argv``, send it ``signum`` as soon as ``ready()`` holds while it still runs; (exit
    code, stderr)."""
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not ready() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert process.poll() is None, "the command ended before it was interrupted"
    process.send_signal(signum)
    err = process.communicate(timeout=120)[1]
    return process.returncode, err


@pytest.mark.extended  # a whole run twice, ≈ 1 min each on 2 cores; the corpus count below stays in `make test`
@pytest.mark.parametrize("name", list(CASES))
def test_an_interrupted_command_says_how_to_continue_and_continuing_finishes_the_run(tmp_path, name):
    args, signum, unit = CASES[name]
    env = environment()
    run_to_end(command(*args, "--out", str(tmp_path / "reference")), env)
    out = tmp_path / "interrupted"
    code, err = interrupted(command(*args, "--out", str(out)), env, signum,
                            ready=lambda: (out / "checkpoint" / "state.json").is_file())
    assert code == 128 + signum, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    line = lines[0]
    assert line.startswith(f"ctxstair: interrupted by {signal.Signals(signum).name}: training is kept up to its "
                           f"checkpoint at {unit} "), line
    again = shlex.split(line.split("continue with: ", 1)[1])
    assert again == ["ctxstair", *args, "--out", str(out), "--resume"]
    finished = subprocess.run(command(*again[1:]), env=env, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert_same_files(out, tmp_path / "reference")


def test_an_interrupted_corpus_count_continues_to_the_same_statistics(tmp_path):
    rng = np.random.default_rng(0)
    rng.integers(0, 40, size=400_000).astype(np.uint16).tofile(tmp_path / "train.bin")
    args = ["corpus", "count", str(tmp_path / "train.bin"), "--vocab-size", "40", "--window", "8", "--tokens",
            "3,5,7,11,13", "--prefix-labels", "9", "--sample-windows", "6", "--unit-tokens", "4096"]
    env = environment()
    run_to_end(command(*args, "--out", str(tmp_path / "reference")), env)
    out = tmp_path / "interrupted"
    code, err = interrupted(command(*args, "--out", str(out)), env, signal.SIGINT,
                            ready=lambda: len(list((out / ".units").glob("*.json"))) >= 10)
    assert code == 130 and err.count("\n") == 1 and "Traceback" not in err, err
    again = shlex.split(err.split("continue with: ", 1)[1])
    assert again == ["ctxstair", *args, "--out", str(out), "--resume"]
    assert subprocess.run(command(*again[1:]), env=env, capture_output=True, timeout=600).returncode == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == \
        {p.name: p.read_bytes() for p in (tmp_path / "reference").iterdir()}

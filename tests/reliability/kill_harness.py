"""Kill-and-resume harness shared by the kill tests: run a command to the end once (the reference),
then start the same command with ``--resume`` again and again, SIGKILL it after T·u (u drawn from
U(0.15, 0.95) with a fixed seed), and compare every finished directory with the reference byte for
byte. (`--resume` of a directory that does not exist yet starts the run, so every attempt is
literally the same command.)"""

import csv
import io
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from recipe_helpers import run_contents
from safetensors.numpy import load as load_safetensors

SRC = Path(__file__).resolve().parents[2] / "src"
KILLS = 12
# Training long enough next to start-up, analysis and report that kills land in it too (checkpoints
# every 500 epochs), with few snapshots to analyse.
SMALL_RUN = ["--set", "task.N=8", "--set", "model.d=16", "--set", "train.epochs=3000",
             "--set", "snapshots.log_points=4", "--set", "snapshots.every=500", "--set", "analysis.probe_steps=60"]
TINY_LM = ["--set", "model.d_model=16", "--set", "model.n_layers=1", "--set", "model.n_heads=2",
           "--set", "model.head_dim=8", "--set", "model.d_mlp=32", "--set", "corpus.window=16",
           "--set", "corpus.vocab_size=300",
           "--set", "corpus.max_tokens=20000", "--set", "train.steps=600", "--set", "train.batch_size=8",
           "--set", "train.lr=0.01", "--set", "snapshots.log_points=3", "--set", "snapshots.every=150",
           "--set", "analysis.k=40", "--set", "analysis.probe_steps=30", "--set", "analysis.windows=16"]


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "ctxstair", *args]


def environment(threads: int | None = 1) -> dict[str, str]:
    """The commands' environment: ``threads`` torch threads (None: ctxstair's default, every usable core)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CTXSTAIR_THREADS"):
        env.pop(name, None)
    return env if threads is None else {**env, "CTXSTAIR_THREADS": str(threads)}


def run_to_end(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return time.perf_counter() - start


def kill_after(argv: list[str], seconds: float, env: dict[str, str]) -> bool:
    """Start ``argv``, SIGKILL it after ``seconds``; True if it was still running then (if it
    finished first, it must have succeeded)."""
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return True
    assert process.returncode == 0, err.decode()[-3000:]
    return False


def check_visible_files_complete(root: Path) -> None:
    """Every file whose name does not start with '.' (temporaries do) parses completely."""
    for path in root.rglob("*"):
        if not path.is_file() or any(part.startswith(".") for part in path.relative_to(root).parts):
            continue
        data = path.read_bytes()
        suffix = path.suffix
        if suffix == ".json":
            json.loads(data)
        elif suffix == ".jsonl":
            [json.loads(line) for line in data.decode().splitlines()]
        elif suffix == ".csv":
            assert list(csv.reader(io.StringIO(data.decode())))[0], path
        elif suffix == ".yaml":
            yaml.safe_load(data)
        elif suffix == ".safetensors":
            load_safetensors(data)
        elif suffix == ".npz":
            with np.load(io.BytesIO(data)) as arrays:
                [arrays[name] for name in arrays.files]
        elif suffix == ".png":
            assert data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82"), path
        elif suffix == ".html":
            assert data.rstrip().endswith(b"</html>"), path


def kill_and_resume(argv, base: Path, reference: Path, reference_seconds: float, seed: int, kills: int = KILLS,
                    env: dict[str, str] | None = None) -> list[str]:
    """Run ``argv(out) --resume`` and SIGKILL it after T·u, again and again, until ``kills`` kills have
    interrupted it; whenever an attempt finishes on its own (the run is complete), compare it with
    ``reference`` and go on in a new directory. Check the visible files after every kill; return
    what was on disk after each (the record of where the kills landed)."""
    env = environment() if env is None else env
    rng = random.Random(seed)
    states, chain = [], 0
    while len(states) < kills:
        out = base / f"attempts{chain}"
        while len(states) < kills and kill_after(argv(out) + ["--resume"],
                                                 reference_seconds * rng.uniform(0.15, 0.95), env):
            if out.exists():
                check_visible_files_complete(out)
            states.append(describe(out))
        if len(states) == kills:
            run_to_end(argv(out) + ["--resume"], env)
        assert_same_files(out, reference)
        chain += 1
    assert len(set(states)) >= 2, f"every kill found the same state: {states[0]}"
    print("\n".join(["what each kill left:", *states]))  # shown with pytest -s: the record in docs/reliability.md
    return states


def describe(out: Path) -> str:
    """Where a killed attempt left each run directory under ``out``: 'nothing', 'created',
    'training (checkpoint at N)', 'trained', 'analysed', 'reported' (the record of where kills land)."""
    if not out.exists():
        return "nothing"
    phases = []
    for config in sorted(out.rglob("config.yaml")):
        run = config.parent
        state = run / "checkpoint" / "state.json"
        saved = json.loads(state.read_text()) if state.is_file() else {}
        phase = ("reported" if (run / "report.html").is_file() else "analysed" if (run / "alignment.csv").is_file()
                 else f"training (checkpoint at {saved.get('epoch', saved.get('step'))})" if saved
                 else "trained" if (run / "resources.json").is_file() else "created")
        phases.append(f"{run.relative_to(out).as_posix()}: {phase}" if run != out else phase)
    return "; ".join(phases) or "created"


def assert_same_files(out: Path, reference: Path) -> None:
    got, want = run_contents(out), run_contents(reference)
    assert sorted(got) == sorted(want), f"files differ: {sorted(set(got) ^ set(want))}"
    differing = [name for name in want if got[name] != want[name]]
    assert differing == [], f"contents differ from the uninterrupted run: {differing}"
    assert not [p for p in out.rglob("*") if p.name.startswith(".")]  # no temporaries left behind



"""The staircase monitor inside FSDP2 training (two processes, gloo, CPU): every rank calls
``measure``; the embedding rows of the tracked tokens are gathered from the ranks holding them and
the whole network only for the path measures; the numbers equal the unsharded model's, and
measuring between optimizer steps leaves the trained weights bit for bit as without it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"


@pytest.fixture(scope="module")
def fsdp2(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("fsdp2") / "result.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(SRC), str(TESTS)])}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
                             str(TESTS / "monitor_fsdp2_worker.py"), str(out)],
                            env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_embedding_is_really_sharded(fsdp2):
    assert fsdp2["local_rows"] == 151  # rank 0's half of the 301 rows


def test_fsdp2_measures_equal_the_unsharded_model(fsdp2):
    reference, sharded = fsdp2["reference"], fsdp2["sharded"]
    assert sharded.keys() == reference.keys() and any(k.startswith("path_share/") for k in reference)
    for name, value in reference.items():
        assert sharded[name] == pytest.approx(value, rel=0, abs=1e-6), name


def test_measuring_between_steps_leaves_the_weights_bitwise_unchanged(fsdp2):
    assert fsdp2["weights_equal"] is True

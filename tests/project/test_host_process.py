"""A library that runs inside someone else's training changes nothing in their process: importing any
module of ctxstair leaves torch's thread count and deterministic-algorithms flag, numpy's BLAS threads,
the environment and matplotlib's backend as the host set them. Our own entry points (the command
line, the trainers, an explicit ``ctxstair.numerics.configure()``) are what set the floating-point
mode, and the monitor's training-weights test (tests/monitor/test_monitor.py) shows a monitored run computes
the same weights as an unmonitored one."""

import json
import os
import subprocess
import sys

from repo_paths import SRC

#: Run in a fresh interpreter: the host's settings first, then every module of the package. Lightning
#: is imported by the host, as by anyone who uses ctxstair's Lightning callback: its own import sets
#: PYTORCH_NVML_BASED_CUDA_CHECK, which is Lightning's doing, not ours.
HOST = r"""
import importlib, json, os, pkgutil, sys
import torch, numpy, matplotlib, lightning
from threadpoolctl import threadpool_info

torch.set_num_threads(1)
torch.use_deterministic_algorithms(False)
matplotlib.use("svg")

def state():
    return {"threads": torch.get_num_threads(), "deterministic": torch.are_deterministic_algorithms_enabled(),
            "blas": sorted((pool["internal_api"], pool["num_threads"]) for pool in threadpool_info()),
            "environment": dict(os.environ), "backend": matplotlib.get_backend()}

before = state()
import ctxstair
names = sorted(m.name for m in pkgutil.walk_packages(ctxstair.__path__, "ctxstair."))
for name in names:
    importlib.import_module(name)
after = state()
print(json.dumps({"modules": len(names), "before": before, "after": after}))
"""


def test_importing_every_module_leaves_the_host_process_as_it_was():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXSTAIR_", "MPLBACKEND"))}
    done = subprocess.run([sys.executable, "-c", HOST], env={**env, "PYTHONPATH": str(SRC)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["modules"] > 100  # the whole package, not a corner of it
    before, after = result["before"], result["after"]
    assert (before["threads"], before["deterministic"]) == (1, False)
    changed = {key: (before["environment"].get(key), after["environment"].get(key))
               for key in set(before["environment"]) | set(after["environment"])
               if before["environment"].get(key) != after["environment"].get(key)}
    assert changed == {}
    assert after == before


def test_an_explicit_configure_is_what_sets_the_floating_point_mode():
    # The check above can fail: the same host calling our entry point does change torch's state.
    code = ("import torch; torch.set_num_threads(1); torch.use_deterministic_algorithms(False)\n"
            "from ctxstair import numerics; numerics.configure(); numerics.apply_to_torch()\n"
            "print(torch.are_deterministic_algorithms_enabled())")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXSTAIR_")}
    done = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(SRC)}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True"]

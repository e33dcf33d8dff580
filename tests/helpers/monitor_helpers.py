"""Shared by tests/monitor/test_monitor.py and its two-process worker: the example script as a module and the
arguments that shorten it to a tiny run (a 1-layer, d = 16 Llama, 12 steps, checkpoints every 5)."""

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trainer_staircase.py"
TINY_ARGS = ["--vocab-size", "300", "--window", "32", "--max-tokens", "20000", "--d-model", "16", "--n-layers", "1",
             "--steps", "12", "--batch-size", "8", "--logging-steps", "100", "--save-steps", "5", "--k", "20",
             "--monitor-windows", "100000", "--log-points", "4", "--every", "5", "--paths-every", "5"]


def example():
    """examples/trainer_staircase.py, imported as a module."""
    spec = importlib.util.spec_from_file_location("trainer_staircase", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

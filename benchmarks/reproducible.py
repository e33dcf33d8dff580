"""What reproducible mode costs (CTXSTAIR_REPRODUCIBLE=1: MKL's COMPATIBLE branch, ATen's AVX2
kernels, OpenBLAS Haswell, numpy without AVX-512, 2 threads) next to the default mode.

    python benchmarks/reproducible.py   # about 3 min on 2 cores; prints a Markdown table

The mode is fixed when numpy and torch load, so every measurement is a fresh process; the two modes
alternate (default, reproducible, default, ...) so that a change in the machine's load hits both.
Measured side by side in one run:

* a float32 2048² matmul (best of 5, after a warm-up) — the BLAS rate each mode gets;
* ``ctxstair run staircase-add`` at its defaults (train, analyse, report), wall seconds, median of
  ``REPEATS`` runs — what a user waits for.

The default mode's thread count is every usable core (2 here); reproducible mode's is 2 whatever
the machine, so on this machine the ratio is the cost of the pinned code paths alone.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPEATS = 3
MODES = {"default": "0", "reproducible": "1"}
MATMUL = """
import ctxstair, time, torch
from ctxstair import numerics
numerics.apply_to_torch()
a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
a @ b
best = min(__import__('timeit').repeat(lambda: a @ b, number=1, repeat=5))
print(2 * 2048**3 / best / 1e9)
"""


def _environment(mode: str) -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[1] / "src")
    return {**os.environ, "CTXSTAIR_REPRODUCIBLE": MODES[mode],
            "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}


def matmul_rate(mode: str) -> float:
    """GFLOP/s of a float32 2048² matmul in a fresh process of ``mode``."""
    done = subprocess.run([sys.executable, "-c", MATMUL], env=_environment(mode), capture_output=True, text=True,
                          check=True)
    return float(done.stdout.split()[-1])


def recipe_seconds(mode: str, out: Path) -> float:
    """Wall seconds of ``ctxstair run staircase-add`` (defaults) in ``mode``."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ctxstair", "run", "staircase-add", "--out", str(out), "--force"],
                   env=_environment(mode), capture_output=True, check=True)
    return time.perf_counter() - start


def main() -> None:
    rates = {mode: [] for mode in MODES}
    seconds = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(REPEATS):
            for mode in MODES:
                rates[mode].append(matmul_rate(mode))
                seconds[mode].append(recipe_seconds(mode, Path(tmp) / mode))
        threads = {mode: json.loads((Path(tmp) / mode / "resources.json").read_text())["numerics"]["threads"]
                   for mode in MODES}
    rate = {mode: max(v) for mode, v in rates.items()}
    wall = {mode: statistics.median(v) for mode, v in seconds.items()}
    print("| mode | threads | matmul float32 2048² (GFLOP/s) | staircase-add wall (s, median) |")
    print("|---|---|---|---|")
    for mode in MODES:
        print(f"| {mode} | {threads[mode]} | {rate[mode]:.0f} | {wall[mode]:.1f} |")
    print(f"\nreproducible / default: matmul rate {rate['reproducible'] / rate['default']:.2f}×, "
          f"staircase-add time {wall['reproducible'] / wall['default']:.2f}×")
    print("runs: " + "; ".join(f"{mode} {', '.join(f'{s:.1f}' for s in seconds[mode])} s" for mode in MODES))


if __name__ == "__main__":
    main()

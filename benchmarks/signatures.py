"""Time the vectorised signature estimator on its two reference workloads.

    python benchmarks/signatures.py        # prints a Markdown table; numbers go to RESULTS.md

(a) every order (0 and 1) of the `add` task with N = 40 (1,600 samples, L = 2, all 81 labels,
    all 40 context tokens); (b) the order-2 label signature of a random dataset with n = 100,000,
    L = 8, V = 64 (dense 64^4 result). Each is timed 5 times; the median and the minimum are shown.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import numpy as np

from ctxstair import signatures, tasks


def timed(fn, repeats: int = 5) -> tuple[float, float]:
    """Median and minimum wall time of ``fn()`` in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def main() -> None:
    add = tasks.make("add", N=40)
    all_orders_add = lambda: [  # noqa: E731
        signatures.label_signature(add.X, add.y, m, add.vocab_size, tokens=add.tokens) for m in range(add.seq_len)
    ]
    rng = np.random.default_rng(0)
    X = rng.integers(0, 64, size=(100_000, 8))
    y = rng.integers(0, 64, size=100_000)
    order2_random = lambda: signatures.label_signature(X, y, 2, 64)  # noqa: E731

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, numpy {np.__version__}\n")
    print("| workload | median (s) | min (s) |\n|---|---|---|")
    for name, fn in [
        ("`add` N=40, orders 0 and 1 (n=1,600, L=2)", all_orders_add),
        ("random n=100,000, L=8, V=64, order 2 (dense 64^4)", order2_random),
    ]:
        median, best = timed(fn)
        print(f"| {name} | {median:.3f} | {best:.3f} |")


if __name__ == "__main__":
    main()

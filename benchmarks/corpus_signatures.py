"""Time the corpus-scale signatures at the reference size: 5 M tokens.

    python benchmarks/corpus_signatures.py        # prints a Markdown table; numbers go to RESULTS.md

Windows: 78,125 rows of T = 64 tokens drawn independently from a Zipf–Mandelbrot distribution over
V = 8,000 ids (p_k ∝ 1/(k + 2.7), ids shuffled so that frequency does not follow the id). Tokens =
the 200 most frequent ids, labels and context = the 1,000 most frequent. Every function is timed 3
times (median, min and max shown; the first call of a process also pays for fresh memory pages),
then called once more under ``tracemalloc`` for its peak memory above what was allocated before.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
import tracemalloc

import numpy as np

from ctxstair import signatures

V, N_WINDOWS, T = 8_000, 78_125, 64


def zipf_windows(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Windows int (N_WINDOWS, T) and the ids by decreasing frequency (V,)."""
    rng = np.random.default_rng(seed)
    p = 1 / (np.arange(V) + 2.7)
    by_rank = rng.permutation(V)  # by_rank[k]: the id of the k-th most frequent token
    windows = by_rank[rng.choice(V, size=(N_WINDOWS, T), p=p / p.sum())]
    return windows, by_rank


def timed(fn, repeats: int = 3) -> tuple[float, float, float, float]:
    """Median, min and max wall time of ``fn()`` in seconds, and its peak memory in MiB."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    return statistics.median(times), min(times), max(times), peak / 2**20


def main() -> None:
    windows, by_rank = zipf_windows()
    tokens, frequent = by_rank[:200], by_rank[:1000]
    workloads = [
        ("`next_token_occurrence` → (8,000,)", lambda: signatures.next_token_occurrence(windows, V)),
        ("`next_token_signature`, 200 tokens → (200, 8,000)",
         lambda: signatures.next_token_signature(windows, V, tokens=tokens)),
        ("`prefix_signature`, 200 / 1,000 / 1,000 → (200, 1,000, 1,000)",
         lambda: signatures.prefix_signature(windows, tokens, frequent, frequent)),
    ]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, numpy {np.__version__}")
    print(f"windows: {N_WINDOWS:,} x T = {T} = {windows.size:,} tokens over V = {V:,}\n")
    print("| workload | median (s) | min (s) | max (s) | peak memory (MiB) |\n|---|---|---|---|---|")
    for name, fn in workloads:
        median, best, worst, peak = timed(fn)
        print(f"| {name} | {median:.3f} | {best:.3f} | {worst:.3f} | {peak:,.0f} |")


if __name__ == "__main__":
    main()
